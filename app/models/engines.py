"""Engines per node: this node's (with controls) and other nodes' (read-only), one row each.

Rows are built by pure functions from the wire types plus what the GUI adds on top: the
pending action, the last command's failure, install progress. The controller owns those
inputs; the views only read rows. ``confirms`` decides which state change answers a command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import urlsplit

from PySide6.QtCore import QByteArray, QObject, Qt
from PySide6.QtGui import QColor

from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel, ModelIndex
from backend.protocol.types import (
    DiscoveredNode,
    EngineName,
    EngineState,
    EngineStatus,
    InstallProgress,
    NodeId,
)

RowState = EngineState | Literal["unreachable"]
EngineKey = tuple[NodeId, EngineName]

MIN_PORT = 1024
MAX_PORT = 65535

# Which front door serves which engine (LM Studio's models go through the OpenAI door).
ENGINE_DOORS: dict[str, str] = {"ollama": "ollama", "lmstudio": "openai", "llamacpp": "llamacpp"}
DOOR_NAMES: dict[str, str] = {
    "ollama": "Ollama API",
    "openai": "OpenAI-compatible API",
    "llamacpp": "llama.cpp API",
}
ENGINE_ORDER = ("ollama", "lmstudio", "llamacpp")
DISPLAY_NAMES: dict[str, str] = {
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "llamacpp": "llama.cpp (llama-server)",
    "openai": "OpenAI-compatible server",
}

STATE_LABELS: dict[RowState, str] = {
    "not-installed": "Not installed",
    "stopped": "Stopped",
    "starting": "Starting",
    "running": "Running",
    "stopping": "Stopping",
    "error": "Error",
    "unreachable": "Unreachable",
}
_GREEN, _AMBER, _GREY, _RED = "#2e7d32", "#b26a00", "#808080", "#c62828"
STATE_COLOURS: dict[RowState, str] = {
    "not-installed": _GREY,
    "stopped": _GREY,
    "starting": _AMBER,
    "running": _GREEN,
    "stopping": _AMBER,
    "error": _RED,
    "unreachable": _GREY,
}
PENDING_COLOUR = _AMBER


@dataclass(frozen=True, slots=True)
class InstallStep:
    """The last install progress of an engine: a stage and, where measurable, a percentage."""

    stage: str
    percent: float | None = None


@dataclass(frozen=True, slots=True)
class EngineRow:
    """One engine on one node, as the Engines page shows it.

    ``port`` is the engine's own port (this node only); ``door_port`` the front door's real
    port. ``pending`` is the store's verb while an action is unconfirmed; ``notice`` the last
    command's failure or timeout; ``port_error`` a rejected port (by the form or the broker).
    """

    node_id: NodeId
    node_name: str
    engine: EngineName
    display_name: str
    local: bool
    state: RowState
    installed: bool
    door: str
    door_port: int | None = None
    port: int | None = None
    default_port: int | None = None
    adopted: bool = False
    pid: int | None = None
    slots: int | None = None
    revision: int = 0
    error: str | None = None
    address: str | None = None
    models: tuple[str, ...] = ()
    loaded: tuple[str, ...] = ()
    pending: str | None = None
    notice: str | None = None
    port_error: str | None = None
    install: InstallStep | None = None

    @property
    def key(self) -> EngineKey:
        """The row's identity: (node id, engine)."""
        return (self.node_id, self.engine)

    @property
    def read_only(self) -> bool:
        """Other nodes' engines cannot be controlled from here (until pairing)."""
        return not self.local


@dataclass(frozen=True, slots=True)
class LocalExtras:
    """What the GUI adds to a local ``EngineStatus``."""

    pending: str | None = None
    notice: str | None = None
    port_error: str | None = None
    install: InstallStep | None = None


def local_row(
    node_id: NodeId,
    node_name: str,
    status: EngineStatus,
    doors: dict[str, int],
    extras: LocalExtras,
) -> EngineRow:
    """This node's engine from its status, the open front doors and the GUI's extras."""
    return EngineRow(
        node_id=node_id,
        node_name=node_name,
        engine=status.engine,
        display_name=status.display_name,
        local=True,
        state=status.state,
        installed=status.installed,
        door=status.front_door,
        door_port=doors.get(status.front_door),
        port=status.port,
        default_port=status.default_port,
        adopted=status.adopted,
        pid=status.pid,
        slots=status.slots,
        revision=status.revision,
        error=status.error,
        pending=extras.pending,
        notice=extras.notice,
        port_error=extras.port_error,
        install=extras.install,
    )


def remote_rows(node: DiscoveredNode) -> list[EngineRow]:
    """Another node's running engines (discovery lists only running ones), read-only."""
    rows = []
    for engine, models in sorted(node.engines.items(), key=lambda item: _engine_rank(item[0])):
        door = ENGINE_DOORS.get(engine, engine)
        # A PAIR node publishes its front doors; an engine-only address its engine's port.
        port = node.ports.get(door) if node.kind == "pair" else node.ports.get(engine)
        rows.append(
            EngineRow(
                node_id=node.node_id,
                node_name=node.name,
                engine=EngineName(engine),
                display_name=DISPLAY_NAMES.get(engine, engine),
                local=False,
                state="running" if node.reachable else "unreachable",
                installed=True,
                door=door,
                door_port=port,
                address=node.addresses[0] if node.addresses else None,
                models=tuple(models.models or ()),
                loaded=tuple(models.loaded or ()),
            )
        )
    return rows


class EngineCommand(StrEnum):
    """What the user can ask of one of this node's engines."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"
    INSTALL = "install"
    SET_PORT = "set-port"


VERBS: dict[EngineCommand, str] = {
    EngineCommand.START: "Starting",
    EngineCommand.STOP: "Stopping",
    EngineCommand.RESTART: "Restarting",
    EngineCommand.INSTALL: "Installing",
    EngineCommand.SET_PORT: "Changing port",
}


@dataclass(eq=False)
class Expectation:
    """A command in flight: what confirms it. Compared by identity (one per click)."""

    command: EngineCommand
    baseline: int  # the engine's revision when clicked: older pushes confirm nothing
    port: int | None = None
    expired: bool = False


def confirms(expect: Expectation, status: EngineStatus) -> bool:
    """Whether ``status`` (a state-changed event) is the outcome of ``expect``'s command."""
    if status.revision <= expect.baseline:
        return False
    if status.state == "error":
        return True
    if expect.command in (EngineCommand.START, EngineCommand.RESTART):
        return status.state == "running"
    if expect.command is EngineCommand.STOP:
        return status.state in ("stopped", "not-installed")
    if expect.command is EngineCommand.INSTALL:
        return status.installed
    return status.port == expect.port and status.state in ("running", "stopped", "not-installed")


def timed_out(verb: str) -> str:
    """The notice for an action the backend did not confirm within the store's timeout."""
    return f"{verb} did not confirm in time; the state shown is the last one reported."


def _engine_rank(engine: str) -> tuple[int, str]:
    known = engine in ENGINE_ORDER
    return (ENGINE_ORDER.index(engine) if known else len(ENGINE_ORDER), engine)


def install_step(progress: InstallProgress) -> InstallStep | None:
    """What to show for an install progress event; None once it is over."""
    if progress.done:
        return None
    return InstallStep(progress.stage, progress.percent)


def door_ports(front_doors: dict[str, str]) -> dict[str, int]:
    """Front door name → real port, from ``status``'s ``front_doors`` URLs."""
    ports: dict[str, int] = {}
    for door, url in front_doors.items():
        try:
            port = urlsplit(url).port
        except ValueError:
            continue
        if port is not None:
            ports[door] = port
    return ports


def parse_port(text: str) -> int | str:
    """A port typed by the user, or a sentence saying what is wrong with it."""
    cleaned = text.strip()
    if not cleaned.isdigit():
        return f"Enter a number from {MIN_PORT} to {MAX_PORT}."
    port = int(cleaned)
    if not MIN_PORT <= port <= MAX_PORT:
        return f"The port must be from {MIN_PORT} to {MAX_PORT}."
    return port


def state_label(row: EngineRow) -> str:
    """The state as the card shows it: the pending verb wins over the last known state."""
    if row.pending is not None:
        return f"{row.pending}…"
    label = STATE_LABELS[row.state]
    if row.state == "running" and row.adopted:
        return f"{label} (started outside PAIR)"
    return label


def state_colour(row: EngineRow) -> QColor:
    """The indicator colour of the state (amber while an action is pending)."""
    return QColor(PENDING_COLOUR if row.pending is not None else STATE_COLOURS[row.state])


def _port_text(row: EngineRow) -> str:
    return str(row.port) if row.port is not None else ""


def _door_text(row: EngineRow) -> str:
    return str(row.door_port) if row.door_port is not None else ""


COLUMNS: tuple[Column[EngineRow], ...] = (
    Column("Node", lambda r: r.node_name),
    Column("Engine", lambda r: r.display_name),
    Column("State", state_label, tooltip=lambda r: r.notice or r.error, foreground=state_colour),
    Column("Port", _port_text),
    Column("Front door", _door_text),
)

NODE_ROLE = ROW_ROLE + 1
ENGINE_ROLE = ROW_ROLE + 2
STATE_ROLE = ROW_ROLE + 3
PENDING_ROLE = ROW_ROLE + 4
READ_ONLY_ROLE = ROW_ROLE + 5
_ROLE_VALUES: dict[int, Callable[[EngineRow], object]] = {
    NODE_ROLE: lambda r: r.node_id,
    ENGINE_ROLE: lambda r: r.engine,
    STATE_ROLE: lambda r: r.state,
    PENDING_ROLE: lambda r: r.pending,
    READ_ONLY_ROLE: lambda r: r.read_only,
}
_ROLE_NAMES: dict[int, bytes] = {
    ROW_ROLE: b"row",
    NODE_ROLE: b"node",
    ENGINE_ROLE: b"engine",
    STATE_ROLE: b"state",
    PENDING_ROLE: b"pending",
    READ_ONLY_ROLE: b"readOnly",
}


class EnginesModel(KeyedTableModel[EngineKey, EngineRow]):
    """Engines keyed by (node id, engine); ``ROW_ROLE`` gives the ``EngineRow``, the other
    roles its node, engine, raw state, pending verb and whether it is read-only."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(COLUMNS, lambda row: row.key, parent)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """The base roles, plus the engine roles above."""
        getter = _ROLE_VALUES.get(role)
        if getter is None:
            return super().data(index, role)
        if not index.isValid() or not 0 <= index.row() < self.rowCount():
            return None
        return getter(self.row_at(index.row()))

    def roleNames(self) -> dict[int, QByteArray]:
        """Qt's default role names plus the engine roles (for QML-style access and debugging)."""
        names = dict(super().roleNames())
        names.update({role: QByteArray(name) for role, name in _ROLE_NAMES.items()})
        return names

    def node_rows(self, node_id: NodeId) -> list[EngineRow]:
        """The rows of one node, in display order."""
        return [row for row in self.rows() if row.node_id == node_id]

    def sync_node(self, node_id: NodeId, rows: list[EngineRow]) -> None:
        """Make one node's rows equal ``rows`` with row-level changes (other nodes untouched)."""
        wanted = {row.key for row in rows}
        for row in self.node_rows(node_id):
            if row.key not in wanted:
                self.remove(row.key)
        for row in rows:
            self.upsert(row)
