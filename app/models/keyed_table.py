"""The one keyed list model: rows keyed by id, row-level updates, resets only on snapshots."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec
from PySide6.QtCore import (
    QAbstractTableModel,
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import QColor

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

ROW_ROLE = Qt.ItemDataRole.UserRole + 1
_NO_PARENT = QModelIndex()
ModelIndex = QModelIndex | QPersistentModelIndex


class Column(msgspec.Struct, Generic[R], frozen=True):
    """How one column shows a row: its text, and optionally a tooltip and a text colour."""

    title: str
    text: Callable[[R], str]
    tooltip: Callable[[R], str | None] | None = None
    foreground: Callable[[R], QColor | None] | None = None


class Role(msgspec.Struct, Generic[R], frozen=True):
    """A data role of a model beyond the columns: its name and how a row answers it."""

    name: bytes
    value: Callable[[R], object]


class KeyedTableModel(QAbstractTableModel, Generic[K, R]):
    """A flat table whose rows are immutable values identified by ``key(row)``.

    ``upsert``/``remove`` emit row-level ``dataChanged``/insert/remove signals; ``sync`` turns a
    full snapshot into such changes; ``reset`` replaces everything (use it for snapshots whose
    rows are not comparable with the ones shown, e.g. after a reconnect).
    """

    def __init__(
        self,
        columns: Sequence[Column[R]],
        key: Callable[[R], K],
        parent: QObject | None = None,
        *,
        roles: Mapping[int, Role[R]] | None = None,
    ) -> None:
        super().__init__(parent)
        self._roles: dict[int, Role[R]] = dict(roles or {})
        self._columns = tuple(columns)
        self._key = key
        self._rows: list[R] = []
        self._index: dict[K, int] = {}

    def rowCount(self, parent: ModelIndex = _NO_PARENT) -> int:
        """Number of rows (a flat table: children of a valid index are none)."""
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: ModelIndex = _NO_PARENT) -> int:
        """Number of columns."""
        return 0 if parent.isValid() else len(self._columns)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """Display text, tooltip, foreground colour, or the row itself for ``ROW_ROLE``."""
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        column = self._columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.text(row)
        if role == Qt.ItemDataRole.ToolTipRole and column.tooltip is not None:
            return column.tooltip(row)
        if role == Qt.ItemDataRole.ForegroundRole and column.foreground is not None:
            return column.foreground(row)
        if role == ROW_ROLE:
            return row
        extra = self._roles.get(role)
        return extra.value(row) if extra is not None else None

    def roleNames(self) -> dict[int, QByteArray]:
        """Qt's default role names, ``row`` and the model's own roles (read by name)."""
        names = dict(super().roleNames())
        names[ROW_ROLE] = QByteArray(b"row")
        names.update({role: QByteArray(extra.name) for role, extra in self._roles.items()})
        return names

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        """Column titles; rows have no header."""
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(self._columns)
        ):
            return self._columns[section].title
        return None

    def rows(self) -> list[R]:
        """The rows in display order (a copy)."""
        return list(self._rows)

    def row_at(self, position: int) -> R:
        """The row at ``position``."""
        return self._rows[position]

    def get(self, key: K) -> R | None:
        """The row with ``key``, if present."""
        position = self._index.get(key)
        return None if position is None else self._rows[position]

    def position(self, key: K) -> int | None:
        """The display position of the row with ``key``, if present."""
        return self._index.get(key)

    def upsert(self, row: R) -> None:
        """Replace the row with the same key (``dataChanged`` if it differs) or append it."""
        key = self._key(row)
        position = self._index.get(key)
        if position is None:
            end = len(self._rows)
            self.beginInsertRows(_NO_PARENT, end, end)
            self._rows.append(row)
            self._index[key] = end
            self.endInsertRows()
        elif self._rows[position] != row:
            self._rows[position] = row
            last = self.index(position, len(self._columns) - 1)
            self.dataChanged.emit(self.index(position, 0), last)

    def remove(self, key: K) -> bool:
        """Remove the row with ``key``; False when there was none."""
        position = self._index.get(key)
        if position is None:
            return False
        self.beginRemoveRows(_NO_PARENT, position, position)
        del self._rows[position]
        self._reindex()
        self.endRemoveRows()
        return True

    def sync(self, rows: Iterable[R]) -> None:
        """Make the table equal a full snapshot with row-level changes only (no reset)."""
        wanted = {self._key(row): row for row in rows}
        for key in [key for key in self._index if key not in wanted]:
            self.remove(key)
        for row in wanted.values():
            self.upsert(row)

    def reset(self, rows: Iterable[R]) -> None:
        """Replace every row at once (one model reset)."""
        self.beginResetModel()
        self._rows = list({self._key(row): row for row in rows}.values())
        self._reindex()
        self.endResetModel()

    def _reindex(self) -> None:
        self._index = {self._key(row): position for position, row in enumerate(self._rows)}
