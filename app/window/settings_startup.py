"""Settings → General's first box: start at login and keep running in the tray."""

from __future__ import annotations

from PySide6.QtCore import QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import QCheckBox, QGroupBox, QVBoxLayout, QWidget

from app.autostart import Autostart
from app.window.settings_fields import error_label, home_relative, show_error
from app.window.widgets import muted_label

MINIMISE_TO_TRAY_KEY = "window/minimise_to_tray"
DEMO_AUTOSTART_NOTE = (
    "Start at login is not offered in pair demo: it would start your own PAIR, not the demo."
)


def minimise_to_tray(preferences: QSettings) -> bool:
    """Whether closing the window keeps PAIR in the tray (the default) instead of quitting."""
    return bool(preferences.value(MINIMISE_TO_TRAY_KEY, True, type=bool))


class StartupBox(QGroupBox):
    """Start at login and keep running in the tray."""

    minimise_to_tray_changed = Signal(bool)

    def __init__(
        self,
        autostart: Autostart,
        preferences: QSettings,
        *,
        tray_available: bool,
        demo: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Startup and window", parent)
        self._autostart = autostart
        self._preferences = preferences
        self.autostart_check = QCheckBox("Start PAIR when I log in")
        self.autostart_note = muted_label(
            DEMO_AUTOSTART_NOTE if demo else f"Adds {home_relative(autostart.location)}"
        )
        self.autostart_error = error_label()
        self.tray_check = QCheckBox("Keep PAIR running in the tray when the window is closed")
        self.tray_note = muted_label()
        self.set_tray_available(tray_available)
        self.autostart_check.setChecked(self._read_autostart())
        layout = QVBoxLayout(self)
        for widget in (self.autostart_check, self.autostart_note, self.autostart_error):
            layout.addWidget(widget)
        layout.addWidget(self.tray_check)
        layout.addWidget(self.tray_note)
        self.autostart_check.setHidden(demo)
        self.autostart_check.toggled.connect(self._on_autostart_check_toggled)
        self.tray_check.toggled.connect(self._on_tray_check_toggled)

    def set_tray_available(self, available: bool) -> None:
        """Offer the tray option (the desktop's tray may appear after PAIR started)."""
        self.tray_note.setText(
            "Closing the window hides it; Quit in the tray menu stops PAIR."
            if available
            else "This desktop has no system tray, so closing the window quits PAIR."
        )
        with QSignalBlocker(self.tray_check):
            self.tray_check.setEnabled(available)
            self.tray_check.setChecked(available and minimise_to_tray(self._preferences))

    def _read_autostart(self) -> bool:
        try:
            return self._autostart.is_enabled()
        except OSError as exc:
            show_error(self.autostart_error, f"Cannot read the login item: {exc}")
            return False

    def _on_autostart_check_toggled(self, on: bool) -> None:
        try:
            if on:
                self._autostart.enable()
            else:
                self._autostart.disable()
        except OSError as exc:
            verb = "add" if on else "remove"
            show_error(self.autostart_error, f"Could not {verb} the login item: {exc}")
            with QSignalBlocker(self.autostart_check):
                self.autostart_check.setChecked(self._read_autostart())
            return
        show_error(self.autostart_error, "")

    def _on_tray_check_toggled(self, on: bool) -> None:
        self._preferences.setValue(MINIMISE_TO_TRAY_KEY, on)
        self._preferences.sync()
        self.minimise_to_tray_changed.emit(on)
