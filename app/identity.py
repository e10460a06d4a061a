"""The names the app gives itself: program, application, desktop entry and icon."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.icons import app_icon

# The first argument names the program: X11 takes the window class (WM_CLASS) from it, so
# running from source (``python -m app``) would otherwise say ``__main__.py``.
PROGRAM_NAME = "pair"
APPLICATION_NAME = "PAIR"


def qt_arguments() -> list[str]:
    """The arguments the app builds its QApplication with."""
    return [PROGRAM_NAME]


def name_application(qt_app: QApplication) -> None:
    """Give ``qt_app`` PAIR's names (window class, desktop entry) and icon."""
    qt_app.setApplicationName(APPLICATION_NAME)
    qt_app.setApplicationDisplayName(APPLICATION_NAME)
    qt_app.setDesktopFileName(PROGRAM_NAME)
    qt_app.setWindowIcon(app_icon())
