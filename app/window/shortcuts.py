"""The main window's keyboard shortcuts: quit, find, close to the tray, and one per page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QWidget

QUIT_KEYS = "Ctrl+Q"
FIND_KEYS = "Ctrl+F"
CLOSE_KEYS = "Ctrl+W"
# Ctrl+1 … Ctrl+9: the pages in sidebar order; a page past the ninth gets no shortcut.
PAGE_KEY_COUNT = 9


@runtime_checkable
class Searchable(Protocol):
    """A page with a search or filter field that Ctrl+F focuses."""

    def focus_search(self) -> None:
        """Put the keyboard focus in the page's search or filter field (text selected)."""


def page_keys(index: int) -> str | None:
    """The shortcut of the page at sidebar ``index`` (``Ctrl+1`` for the first), or None."""
    return f"Ctrl+{index + 1}" if 0 <= index < PAGE_KEY_COUNT else None


def focus_search_of(page: object) -> bool:
    """Focus ``page``'s search field when it offers one (``Searchable``); whether it did."""
    if isinstance(page, Searchable):
        page.focus_search()
        return True
    return False


def add_shortcut(window: QWidget, keys: str, slot: Callable[[], object]) -> QShortcut:
    """A window-wide shortcut for ``keys`` that calls ``slot``."""
    shortcut = QShortcut(QKeySequence(keys), window)
    shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
    shortcut.activated.connect(slot)
    return shortcut
