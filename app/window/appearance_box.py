"""Settings → General → Appearance: follow the desktop's light or dark scheme, or fix one."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QWidget

from app.window.theme import PREFERENCE_KEY, Appearance, read_appearance


def stored_appearance(preferences: QSettings) -> Appearance:
    """The choice kept in the app's preferences (following the system when none is)."""
    return read_appearance(preferences.value(PREFERENCE_KEY, Appearance.SYSTEM.value))


class AppearanceBox(QGroupBox):
    """A combo of the three choices; a change is kept at once and announced."""

    changed = Signal(object)  # Appearance

    def __init__(self, preferences: QSettings, parent: QWidget | None = None) -> None:
        super().__init__("Appearance", parent)
        self._preferences = preferences
        self.combo = QComboBox()
        for choice in Appearance:
            self.combo.addItem(choice.label, choice.value)
        self.combo.setCurrentIndex(self.combo.findData(stored_appearance(preferences).value))
        self.combo.setToolTip(
            "Follow the system switches between light and dark with your desktop."
        )
        self.combo.currentIndexChanged.connect(self._on_changed)
        form = QFormLayout(self)
        form.addRow("Colours", self.combo)

    def _on_changed(self, _index: int) -> None:
        choice = read_appearance(self.combo.currentData())
        self._preferences.setValue(PREFERENCE_KEY, choice.value)
        self.changed.emit(choice)
