"""The errors registry (sticky service errors), keyed by (node id, error id)."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QColor

from app.models.keyed_table import Column, KeyedTableModel
from backend.protocol.types import ServiceError, Severity

ErrorKey = tuple[str, str]

SEVERITY_COLOURS: dict[Severity, QColor] = {
    "info": QColor("#1565c0"),
    "warning": QColor("#b26a00"),
    "error": QColor("#c62828"),
}


def error_key(error: ServiceError) -> ErrorKey:
    """The registry's key: an error id is unique per node."""
    return (error.node_id, error.id)


COLUMNS: tuple[Column[ServiceError], ...] = (
    Column("Severity", lambda e: e.severity, foreground=lambda e: SEVERITY_COLOURS[e.severity]),
    Column("Message", lambda e: e.message, tooltip=lambda e: e.message),
    Column("Node", lambda e: e.node_id),
)


class ErrorsModel(KeyedTableModel[ErrorKey, ServiceError]):
    """Service errors; full snapshots from the broker are applied with ``sync`` (no resets)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(COLUMNS, error_key, parent)
