"""Small shared widget helpers: page titles and muted text."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QWidget


def page_title(text: str, parent: QWidget | None = None) -> QLabel:
    """A page heading: the system font, larger and bold."""
    label = QLabel(text, parent)
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * 1.5)
    font.setBold(True)
    label.setFont(font)
    return label


def muted_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A word-wrapped label in the palette's placeholder (secondary) text colour."""
    label = QLabel(text, parent)
    label.setWordWrap(True)
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label
