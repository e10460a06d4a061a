"""Small shared widget helpers: page titles, muted text, the fixed-width font, copying with
feedback, and a table as tall as its rows."""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel, Qt, QTimer
from PySide6.QtGui import QFont, QFontDatabase, QGuiApplication, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QWidget,
)

COPIED_MS = 1500


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


def fixed_font() -> QFont:
    """The system's fixed-width font, for fingerprints and secrets."""
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


def copy_to_clipboard(text: str, button: QPushButton) -> None:
    """Put ``text`` on the clipboard; the button says "Copied" for a moment."""
    QGuiApplication.clipboard().setText(text)
    label = button.text()
    button.setText("Copied")
    QTimer.singleShot(COPIED_MS, button, lambda: button.setText(label))


class FittedTable(QTableView):
    """A read-only, single-row-selecting table as tall as its rows (within bounds), so the
    page scrolls rather than the table; column ``stretch`` takes the spare width."""

    def __init__(
        self, model: QAbstractItemModel, stretch: int, minimum_rows: int, maximum_rows: int
    ) -> None:
        super().__init__()
        self._stretch = stretch
        self._rows = (minimum_rows, maximum_rows)
        self.setModel(model)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.verticalHeader().hide()
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(False)

    def fit(self) -> None:
        """Size the columns to their contents and the height to the rows."""
        header = self.horizontalHeader()
        # The header's own resize-to-contents misses rows that arrive while it is hidden.
        for column in range(header.count()):
            if column != self._stretch:
                self.resizeColumnToContents(column)
        low, high = self._rows
        rows = min(max(self.model().rowCount(), low), high)
        frame = 2 * self.frameWidth()
        height = header.sizeHint().height() + rows * self.verticalHeader().defaultSectionSize()
        if header.length() > self.width() - frame:  # too narrow: a scroll bar takes room
            height += self.horizontalScrollBar().sizeHint().height()
        self.setFixedHeight(height + frame)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Fit again: a narrower table may need its scroll bar."""
        super().resizeEvent(event)
        self.fit()
