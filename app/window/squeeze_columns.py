"""Stretched columns that give way in a narrow table.

Qt shares a table's slack among its stretched sections, but when the other columns alone are
wider than the viewport it leaves the stretched ones at the width they last had (no slack, no
new share): a narrow window then keeps Details and Status wide and scrolls sideways. This filter
watches the viewport's width and, while the other columns leave too little room, holds the
stretched columns at the header's minimum (they elide); with room again they stretch as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QHeaderView, QTableView


class StretchedColumns(QObject):
    """Keeps ``columns`` of ``table`` stretched while there is room, at the minimum when not."""

    def __init__(self, table: QTableView, columns: Sequence[int]) -> None:
        super().__init__(table)
        self._table = table
        self._columns = tuple(columns)
        table.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self.fit()
        return False

    def fit(self) -> None:
        """Stretch the columns, or hold them at the minimum when the rest fill the table."""
        header = self._table.horizontalHeader()
        others = sum(
            header.sectionSize(column)
            for column in range(header.count())
            if column not in self._columns and not header.isSectionHidden(column)
        )
        least = header.minimumSectionSize()
        squeezed = self._table.viewport().width() - others < least * len(self._columns)
        mode = QHeaderView.ResizeMode.Interactive if squeezed else QHeaderView.ResizeMode.Stretch
        for column in self._columns:
            if header.sectionResizeMode(column) != mode:
                header.setSectionResizeMode(column, mode)
            if squeezed and header.sectionSize(column) != least:
                header.resizeSection(column, least)
