"""Supervised components and workers of the broker, one row per component name."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QColor

from app.models.keyed_table import Column, KeyedTableModel
from backend.protocol.types.broker import ComponentInfo, ComponentStatus

_STATUS_COLOURS: dict[ComponentStatus, QColor] = {
    "failed": QColor("#c62828"),
    "backoff": QColor("#b26a00"),
}


def _restarts(component: ComponentInfo) -> str:
    return str(component.restarts)


def _status_colour(component: ComponentInfo) -> QColor | None:
    return _STATUS_COLOURS.get(component.status)


COLUMNS: tuple[Column[ComponentInfo], ...] = (
    Column("Name", lambda c: c.name),
    Column("Kind", lambda c: c.kind),
    Column("Status", lambda c: c.status, foreground=_status_colour),
    Column("Restarts", _restarts),
    Column("Last error", lambda c: c.last_error or "", tooltip=lambda c: c.last_error),
)


class ComponentsModel(KeyedTableModel[str, ComponentInfo]):
    """The broker's components keyed by name: name, kind, status, restarts, last error."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(COLUMNS, lambda component: component.name, parent)
