"""Light or dark: the app follows the desktop's colour scheme, or the one the user chose.

Every widget draws from the application palette (style sheets say ``palette(base)``, not a
colour), so switching the palette switches the whole app. Where the platform itself gives a
dark palette for a dark desktop (Windows 11, macOS, GNOME and KDE with their themes) that
palette is kept; where it does not (Fusion on a bare X server, the offscreen platform, a
desktop without a platform theme) PAIR's own dark palette stands in.
"""

from __future__ import annotations

from enum import StrEnum

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QStyleHints
from PySide6.QtWidgets import QApplication

PREFERENCE_KEY = "appearance/scheme"
DARK_LIGHTNESS = 128  # a window colour darker than this is a dark palette


class Appearance(StrEnum):
    """What the user chose in Settings: follow the desktop, or always light or dark."""

    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"

    @property
    def label(self) -> str:
        """The choice as the Settings combo shows it."""
        return {"system": "Follow the system", "light": "Light", "dark": "Dark"}[self.value]


def read_appearance(value: object) -> Appearance:
    """A stored preference as a choice; anything unknown follows the system."""
    try:
        return Appearance(str(value))
    except ValueError:
        return Appearance.SYSTEM


def wants_dark(choice: Appearance, system: Qt.ColorScheme) -> bool:
    """Whether the app should be dark for this choice on a desktop with this scheme."""
    if choice is Appearance.SYSTEM:
        return system is Qt.ColorScheme.Dark
    return choice is Appearance.DARK


def is_dark(palette: QPalette) -> bool:
    """Whether a palette is a dark one (its window colour is dark)."""
    return palette.color(QPalette.ColorRole.Window).lightness() < DARK_LIGHTNESS


_DARK_ROLES: dict[QPalette.ColorRole, str] = {
    QPalette.ColorRole.Window: "#202124",
    QPalette.ColorRole.WindowText: "#e8eaed",
    QPalette.ColorRole.Base: "#17181a",
    QPalette.ColorRole.AlternateBase: "#2a2b2e",
    QPalette.ColorRole.ToolTipBase: "#2a2b2e",
    QPalette.ColorRole.ToolTipText: "#e8eaed",
    QPalette.ColorRole.PlaceholderText: "#9aa0a6",
    QPalette.ColorRole.Text: "#e8eaed",
    QPalette.ColorRole.Button: "#2d2e31",
    QPalette.ColorRole.ButtonText: "#e8eaed",
    QPalette.ColorRole.BrightText: "#ff8a80",
    QPalette.ColorRole.Light: "#3c3d41",
    QPalette.ColorRole.Midlight: "#333438",
    QPalette.ColorRole.Mid: "#4a4c50",
    QPalette.ColorRole.Dark: "#111214",
    QPalette.ColorRole.Shadow: "#000000",
    QPalette.ColorRole.Highlight: "#3b78e7",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.Link: "#8ab4f8",
    QPalette.ColorRole.LinkVisited: "#c58af9",
}
_DISABLED_TEXT = "#6f7378"


def dark_palette() -> QPalette:
    """PAIR's dark palette: calm greys, readable text, the same blue for selection."""
    palette = QPalette()
    for role, colour in _DARK_ROLES.items():
        palette.setColor(role, QColor(colour))
    for role in (
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
    ):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor(_DISABLED_TEXT))
    return palette


def restyle_sheeted_widgets(app: QApplication) -> None:
    """Apply each widget's style sheet again: a widget with a style sheet keeps the palette it
    had when the sheet was applied, so without this it stays light in a dark app."""
    for widget in app.allWidgets():
        sheet = widget.styleSheet()
        if sheet:
            widget.setStyleSheet(sheet)


class ThemeFollower(QObject):
    """Keeps the application's palette light or dark as the choice and the desktop say."""

    def __init__(
        self,
        app: QApplication,
        choice: Appearance = Appearance.SYSTEM,
        hints: QStyleHints | None = None,
    ) -> None:
        super().__init__(app)
        self._app = app
        self._hints = hints if hints is not None else QGuiApplication.styleHints()
        self.choice = choice
        self._hints.colorSchemeChanged.connect(self._on_scheme_changed)
        self.apply()

    @property
    def dark(self) -> bool:
        """Whether the app is dark now."""
        return is_dark(self._app.palette())

    def set_choice(self, choice: Appearance) -> None:
        """Follow a new choice at once."""
        self.choice = choice
        self.apply()

    def apply(self, scheme: Qt.ColorScheme | None = None) -> None:
        """Set the palette this choice and the desktop's scheme want."""
        want_dark = wants_dark(self.choice, scheme if scheme is not None else self._scheme())
        self._app.setPalette(QPalette())  # an empty palette: the platform's own again
        if is_dark(self._app.palette()) != want_dark:
            self._app.setPalette(
                dark_palette() if want_dark else self._app.style().standardPalette()
            )
        restyle_sheeted_widgets(self._app)

    def _scheme(self) -> Qt.ColorScheme:
        return self._hints.colorScheme()

    def _on_scheme_changed(self, scheme: Qt.ColorScheme) -> None:
        if self.choice is Appearance.SYSTEM:
            self.apply(scheme)
