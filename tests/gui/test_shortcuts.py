"""Keyboard shortcuts of the main window, and the names the app gives itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLineEdit, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from app.identity import APPLICATION_NAME, name_application, qt_arguments
from app.window.main_window import MainWindow, Page
from app.window.shortcuts import page_keys
from tests.gui.window_rig import window_rig


class SearchPage(QWidget):
    """A page with a filter field, offering ``focus_search``."""

    def __init__(self) -> None:
        super().__init__()
        self.field = QLineEdit()
        QVBoxLayout(self).addWidget(self.field)

    def focus_search(self) -> None:
        self.field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.field.selectAll()


@pytest.fixture
async def window(qtbot: QtBot, tmp_path: Path) -> AsyncIterator[MainWindow]:
    pages = [Page("jobs", "Jobs", SearchPage()), Page("later", "Later", QWidget())]
    async with window_rig(qtbot, tmp_path, pages) as rig:
        main = rig.window
        main.show()
        qtbot.waitExposed(main)
        main.activateWindow()
        yield main


def press(qtbot: QtBot, window: MainWindow, key: Qt.Key) -> None:
    QTest.keyClick(window, key, Qt.KeyboardModifier.ControlModifier)


async def test_ctrl_and_a_digit_switch_pages_in_sidebar_order(
    qtbot: QtBot, window: MainWindow
) -> None:
    press(qtbot, window, Qt.Key.Key_5)
    assert window.current_page == "jobs"
    press(qtbot, window, Qt.Key.Key_1)
    assert window.current_page == "overview"
    press(qtbot, window, Qt.Key.Key_4)
    assert window.current_page == "playground", "the Playground comes after Models"
    # A page added after the six named ones gets the next number; Settings stays last.
    press(qtbot, window, Qt.Key.Key_7)
    assert window.current_page == "later"
    press(qtbot, window, Qt.Key.Key_8)
    assert window.current_page == "settings"
    assert window.sidebar.item(7).toolTip() == "Ctrl+8"


def test_only_nine_pages_get_a_digit() -> None:
    assert page_keys(0) == "Ctrl+1" and page_keys(8) == "Ctrl+9" and page_keys(9) is None


async def test_ctrl_f_focuses_the_search_field_of_a_page_that_has_one(
    qtbot: QtBot, window: MainWindow
) -> None:
    press(qtbot, window, Qt.Key.Key_5)
    page = window.stack.currentWidget()
    assert isinstance(page, SearchPage)
    page.field.setText("llama")
    press(qtbot, window, Qt.Key.Key_F)
    assert page.field.hasFocus() and page.field.selectedText() == "llama"
    press(qtbot, window, Qt.Key.Key_1)  # the overview has no search: nothing happens
    press(qtbot, window, Qt.Key.Key_F)
    assert not window.focus_search()


async def test_ctrl_q_asks_to_quit(qtbot: QtBot, window: MainWindow) -> None:
    with qtbot.waitSignal(window.quit_requested, timeout=2000):
        press(qtbot, window, Qt.Key.Key_Q)


async def test_ctrl_w_hides_to_the_tray_only_when_a_tray_keeps_pair_running(
    qtbot: QtBot, window: MainWindow
) -> None:
    quits: list[int] = []
    window.quit_requested.connect(lambda: quits.append(1))
    press(qtbot, window, Qt.Key.Key_W)
    assert window.isVisible() and not quits
    window.hide_on_close = True
    press(qtbot, window, Qt.Key.Key_W)
    assert not window.isVisible() and not quits


def test_the_app_names_itself_pair_whatever_script_started_it(qapp: QApplication) -> None:
    assert qt_arguments() == ["pair"]
    before = (qapp.applicationName(), qapp.applicationDisplayName(), qapp.desktopFileName())
    try:
        name_application(qapp)
        assert qapp.applicationName() == APPLICATION_NAME == "PAIR"
        assert qapp.desktopFileName() == "pair"
    finally:
        qapp.setApplicationName(before[0])
        qapp.setApplicationDisplayName(before[1])
        qapp.setDesktopFileName(before[2])
