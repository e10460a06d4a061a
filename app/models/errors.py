"""The errors registry (sticky service errors of this node and of every other member), keyed by
(node id, error id), and what the banners make of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import msgspec
from PySide6.QtCore import QObject
from PySide6.QtGui import QColor

from app.models.display_text import display_text
from app.models.keyed_table import Column, KeyedTableModel
from app.window.look import SEVERITY_STATES, severity_colour
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ServiceError, Severity

ErrorKey = tuple[str, str]
# The one entry the broker keeps for a member whose link is down (instead of its own errors).
UNREACHABLE_ID = "cluster:unreachable"


class _SeverityColours(Mapping[Severity, QColor]):
    """Each severity's colour from the one state table, on the palette in use when read."""

    def __getitem__(self, severity: Severity) -> QColor:
        return severity_colour(severity)

    def __iter__(self) -> Iterator[Severity]:
        return iter(SEVERITY_STATES)

    def __len__(self) -> int:
        return len(SEVERITY_STATES)


SEVERITY_COLOURS: Mapping[Severity, QColor] = _SeverityColours()


def error_key(error: ServiceError) -> ErrorKey:
    """The registry's key: an error id is unique per node."""
    return (error.node_id, error.id)


def banner_errors(
    errors: Iterable[ServiceError], other: Callable[[NodeId], bool]
) -> list[ServiceError]:
    """What the banners show, this computer's first (``other`` tells another member's apart):
    a member that cannot be reached has its one line and nothing else."""
    listed = list(errors)
    away = {error.node_id for error in listed if error.id == UNREACHABLE_ID}
    shown = [e for e in listed if e.node_id not in away or e.id == UNREACHABLE_ID]
    return sorted(shown, key=lambda error: other(error.node_id))


def banner_text(error: ServiceError, node_name: str | None) -> str:
    """The banner's message; another member's (``node_name``) starts with its name."""
    message = display_text(error.message)
    if node_name is None:
        return message
    if error.id == UNREACHABLE_ID and message.startswith(node_name):
        return message  # the broker's sentence names the member already
    return f"{node_name}: {message}"


class Problem(msgspec.Struct, frozen=True):
    """One banner: the same error reported by one or more computers, and its message."""

    errors: tuple[ServiceError, ...]
    text: str

    @property
    def first(self) -> ServiceError:
        """The first report (its severity and action stand for all)."""
        return self.errors[0]


def listing(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def problems(
    errors: Iterable[ServiceError], node_name: Callable[[NodeId], str | None]
) -> list[Problem]:
    """``errors`` (in banner order) as one problem per id, severity and message: a dead address
    that three members report is one banner naming the three, not three banners."""
    groups: dict[tuple[str, str, str], list[ServiceError]] = {}
    for error in errors:
        groups.setdefault((error.id, error.severity, display_text(error.message)), []).append(error)
    found = []
    for (_, _, message), reports in groups.items():
        if len(reports) == 1:
            text = banner_text(reports[0], node_name(reports[0].node_id))
        else:
            names = [node_name(error.node_id) or "This computer" for error in reports]
            text = f"{listing(names)}: {message}"
        found.append(Problem(tuple(reports), text))
    return found


COLUMNS: tuple[Column[ServiceError], ...] = (
    Column("Severity", lambda e: e.severity, foreground=lambda e: SEVERITY_COLOURS[e.severity]),
    Column("Message", lambda e: e.message, tooltip=lambda e: e.message),
    Column("Node", lambda e: e.node_id),
)


class ErrorsModel(KeyedTableModel[ErrorKey, ServiceError]):
    """Service errors; full snapshots from the broker are applied with ``sync`` (no resets)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(COLUMNS, error_key, parent)
