"""Light and dark: the app's palette follows the user's choice and the desktop's scheme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, QSettings, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QListWidget
from pytestqt.qtbot import QtBot

from app.window.appearance_box import AppearanceBox, stored_appearance
from app.window.theme import (
    DARK_LIGHTNESS,
    Appearance,
    ThemeFollower,
    dark_palette,
    is_dark,
    read_appearance,
    wants_dark,
)


class FakeHints(QObject):
    """The desktop's colour scheme, as a test sets it."""

    colorSchemeChanged = Signal(Qt.ColorScheme)  # noqa: N815 - Qt's name

    def __init__(self, scheme: Qt.ColorScheme) -> None:
        super().__init__()
        self.scheme = scheme

    def colorScheme(self) -> Qt.ColorScheme:
        return self.scheme

    def switch(self, scheme: Qt.ColorScheme) -> None:
        self.scheme = scheme
        self.colorSchemeChanged.emit(scheme)


@pytest.fixture
def app(qapp: QApplication) -> Iterator[QApplication]:
    yield qapp
    qapp.setPalette(QPalette())  # the platform's palette again for the tests after this one


def test_choices_and_schemes_decide_dark() -> None:
    assert wants_dark(Appearance.SYSTEM, Qt.ColorScheme.Dark)
    assert not wants_dark(Appearance.SYSTEM, Qt.ColorScheme.Light)
    assert not wants_dark(Appearance.SYSTEM, Qt.ColorScheme.Unknown)
    assert wants_dark(Appearance.DARK, Qt.ColorScheme.Light)
    assert not wants_dark(Appearance.LIGHT, Qt.ColorScheme.Dark)


def test_a_stored_preference_that_is_not_a_choice_follows_the_system() -> None:
    assert read_appearance("dark") is Appearance.DARK
    assert read_appearance("purple") is Appearance.SYSTEM
    assert read_appearance(None) is Appearance.SYSTEM


def test_dark_palette_is_dark_with_readable_text() -> None:
    palette = dark_palette()
    assert is_dark(palette)
    text = palette.color(QPalette.ColorRole.Text).lightness()
    base = palette.color(QPalette.ColorRole.Base).lightness()
    assert text - base > 150


def test_follows_the_desktop_when_it_turns_dark_and_back(app: QApplication) -> None:
    hints = FakeHints(Qt.ColorScheme.Light)
    follower = ThemeFollower(app, Appearance.SYSTEM, hints)  # type: ignore[arg-type]
    assert not follower.dark
    assert follower.choice is Appearance.SYSTEM
    hints.switch(Qt.ColorScheme.Dark)
    assert is_dark(app.palette())
    hints.switch(Qt.ColorScheme.Light)
    assert not is_dark(app.palette())


def test_a_fixed_choice_ignores_the_desktop(app: QApplication) -> None:
    hints = FakeHints(Qt.ColorScheme.Light)
    follower = ThemeFollower(app, Appearance.DARK, hints)  # type: ignore[arg-type]
    assert is_dark(app.palette())
    hints.switch(Qt.ColorScheme.Light)
    assert is_dark(app.palette())
    follower.set_choice(Appearance.LIGHT)
    assert not is_dark(app.palette())
    hints.switch(Qt.ColorScheme.Dark)
    assert not is_dark(app.palette())


def test_the_settings_choice_is_kept_and_switches_the_palette(
    app: QApplication, qtbot: QtBot, tmp_path: Path
) -> None:
    preferences = QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat)
    box = AppearanceBox(preferences)
    qtbot.addWidget(box)
    assert box.combo.currentData() == "system", "nothing stored follows the system"
    follower = ThemeFollower(app, stored_appearance(preferences), FakeHints(Qt.ColorScheme.Light))  # type: ignore[arg-type]
    box.changed.connect(follower.set_choice)
    box.combo.setCurrentIndex(box.combo.findData("dark"))
    assert is_dark(app.palette())
    assert stored_appearance(preferences) is Appearance.DARK
    again = AppearanceBox(preferences)
    qtbot.addWidget(again)
    assert again.combo.currentText() == "Dark", "the next start shows the kept choice"


def test_a_widget_with_a_style_sheet_turns_dark_with_the_app(
    app: QApplication, qtbot: QtBot
) -> None:
    listing = QListWidget()
    listing.addItem("Overview")
    listing.setStyleSheet("QListWidget::item { padding: 8px 14px; }")
    qtbot.addWidget(listing)
    listing.show()
    qtbot.waitExposed(listing)
    follower = ThemeFollower(app, Appearance.LIGHT, FakeHints(Qt.ColorScheme.Light))  # type: ignore[arg-type]
    follower.set_choice(Appearance.DARK)
    corner = listing.grab().toImage().pixelColor(listing.width() - 4, listing.height() - 4)
    assert corner.lightness() < DARK_LIGHTNESS, corner.name()
