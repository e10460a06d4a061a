"""Engines per node, one row each: this node's and other cluster members' (with controls, the
calls sent with ``node`` for a member), and engines other computers on the network report
(read-only: not a PAIR computer, or not paired with this one).

Rows are built by pure functions from the wire types plus what the GUI adds on top: the
pending action, the last command's failure, install or update progress, the versions. The
controller owns those inputs; the views only read rows. ``confirms`` decides which state
change answers a command.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

import msgspec
from PySide6.QtCore import QObject
from PySide6.QtGui import QColor

from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel, Role
from app.models.scheduler_text import scheduler_line
from app.window import look
from app.window.look import State
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import (
    EngineState,
    EngineStatus,
    EngineVersions,
    InstallProgress,
)
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.scheduler import SchedulerState

RowState = EngineState | Literal["unreachable"]
EngineKey = tuple[NodeId, EngineName]

MIN_PORT = 1024
MAX_PORT = 65535

# Which front door takes each engine's usual port (every door serves every engine's models).
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
ROW_STATES: dict[RowState, State] = {
    "not-installed": State.IDLE,
    "stopped": State.IDLE,
    "starting": State.PENDING,
    "running": State.OK,
    "stopping": State.PENDING,
    "error": State.ERROR,
    "unreachable": State.IDLE,
}


class InstallStep(msgspec.Struct, frozen=True):
    """The last install progress of an engine: a stage and, where measurable, a percentage."""

    stage: str
    percent: float | None = None


class EngineRow(msgspec.Struct, frozen=True):
    """One engine on one node, as the Engines page shows it.

    ``local`` is this node; ``member`` another member of its cluster (managed from here through
    the broker); neither: a computer that only reports its running engines, ``read_only_reason``
    says why it cannot be managed. ``reachable`` is False while a member's link is down (the
    rest is then as last seen). ``port`` is the engine's own port; ``door_port`` the front
    door's real port. ``pending`` is the store's verb while an action is unconfirmed; ``notice``
    the last command's failure or timeout; ``port_error`` a rejected port (by the form or the
    broker); ``update_to`` the version an update would install, ``update_note`` why a newer
    version cannot be installed by PAIR; ``scheduler`` this node's engine's scheduler (other
    members' are not mirrored).
    """

    node_id: NodeId
    node_name: str
    engine: EngineName
    display_name: str
    local: bool
    state: RowState
    installed: bool
    door: str
    member: bool = False
    reachable: bool = True
    read_only_reason: str | None = None
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
    version: str | None = None
    backend: str | None = None  # what it computes on: "CPU", "CUDA 12.4"
    update_to: str | None = None
    update_note: str | None = None
    scheduler: SchedulerState | None = None

    @property
    def key(self) -> EngineKey:
        """The row's identity: (node id, engine)."""
        return (self.node_id, self.engine)

    @property
    def managed(self) -> bool:
        """This node's engine or a member's: the card has controls."""
        return self.local or self.member

    @property
    def read_only(self) -> bool:
        """An engine another computer reports without being a member: shown, not managed."""
        return not self.managed

    @property
    def controllable(self) -> bool:
        """Whether commands can be sent now (a member's link must be up)."""
        return self.managed and self.reachable

    @property
    def where(self) -> str:
        """The computer in a sentence: "this computer" or the member's name."""
        return "this computer" if self.local else self.node_name


class RowExtras(msgspec.Struct, frozen=True):
    """What the GUI adds to an ``EngineStatus``."""

    pending: str | None = None
    notice: str | None = None
    port_error: str | None = None
    install: InstallStep | None = None
    versions: EngineVersions | None = None
    scheduler: SchedulerState | None = None


class Host(msgspec.Struct, frozen=True):
    """The node a managed engine runs on: this node, or a member (``local`` False).

    ``doors`` maps front doors to their real ports; ``address`` is where other computers reach
    a member (from discovery), None for this node.
    """

    node_id: NodeId
    name: str
    local: bool
    reachable: bool = True
    doors: Mapping[str, int] = msgspec.field(default_factory=dict)
    address: str | None = None


def managed_row(host: Host, status: EngineStatus, extras: RowExtras) -> EngineRow:
    """An engine of this node or of a member from its status and the GUI's extras."""
    version, update_to, update_note = version_facts(extras.versions)
    return EngineRow(
        node_id=host.node_id,
        node_name=host.name,
        engine=status.engine,
        display_name=status.display_name,
        local=host.local,
        member=not host.local,
        reachable=host.reachable,
        state=status.state,
        installed=status.installed,
        door=status.front_door,
        door_port=host.doors.get(status.front_door),
        address=host.address,
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
        version=version,
        backend=status.backend,
        update_to=update_to,
        update_note=update_note,
        scheduler=extras.scheduler if host.local else None,
    )


def version_facts(versions: EngineVersions | None) -> tuple[str | None, str | None, str | None]:
    """The installed version, the version an update installs, and why PAIR cannot install a
    newer one (each None when it does not apply)."""
    if versions is None:
        return None, None, None
    newer = versions.latest if versions.update_available else None
    if newer is None:
        return versions.installed, None, None
    if versions.can_update:
        return versions.installed, newer, None
    reason = versions.reason or "PAIR cannot install it"
    return versions.installed, None, f"version {newer} is available; {reason}"


def member_doors(node: DiscoveredNode | None) -> tuple[dict[str, int], str | None]:
    """A member's front-door ports and address as discovery lists it (none when not listed)."""
    if node is None or node.kind != "pair":
        return {}, None
    doors = {door: port for door, port in node.ports.items() if door in DOOR_NAMES}
    return doors, node.addresses[0] if node.addresses else None


def read_only_reason(node: DiscoveredNode) -> str:
    """Why another computer's engines are shown but not managed from here (a phrase)."""
    if node.kind == "engine":
        return "not a PAIR computer"
    return "not paired with this computer"


def remote_rows(node: DiscoveredNode) -> list[EngineRow]:
    """Running engines another computer reports (discovery lists only running ones), read-only."""
    rows = []
    reason = read_only_reason(node)
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
                read_only_reason=reason,
                door_port=port,
                address=node.addresses[0] if node.addresses else None,
                models=tuple(models.models or ()),
                loaded=tuple(models.loaded or ()),
            )
        )
    return rows


def engine_order(status: EngineStatus) -> tuple[int, str]:
    """A sort key: the bundled engines in their usual order, then the rest by id."""
    return _engine_rank(status.engine)


class EngineCommand(StrEnum):
    """What the user can ask of one engine (of this node or of a member)."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"
    INSTALL = "install"
    UPDATE = "update"
    SET_PORT = "set-port"


VERBS: dict[EngineCommand, str] = {
    EngineCommand.START: "Starting",
    EngineCommand.STOP: "Stopping",
    EngineCommand.RESTART: "Restarting",
    EngineCommand.INSTALL: "Installing",
    EngineCommand.UPDATE: "Updating",
    EngineCommand.SET_PORT: "Changing port",
}
PROGRESS_VERBS = (VERBS[EngineCommand.INSTALL], VERBS[EngineCommand.UPDATE])


class Expectation(msgspec.Struct, eq=False):
    """A command in flight: what confirms it. Compared by identity (one per click)."""

    command: EngineCommand
    baseline: int  # the engine's revision when clicked: older pushes confirm nothing
    port: int | None = None
    expired: bool = False


def confirms(expect: Expectation, status: EngineStatus) -> bool:
    """Whether ``status`` (a state change) is the outcome of ``expect``'s command."""
    if status.revision <= expect.baseline:
        return False
    if expect.command is EngineCommand.UPDATE:
        # An update stops and starts the engine (an error may give way to the old version):
        # only its last progress step or its answer ends it.
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
    """The state as the card shows it: the pending verb wins over the last known state; a
    member that cannot be reached shows the state it was last seen in."""
    if row.pending is not None:
        return f"{row.pending}…"
    label = STATE_LABELS[row.state]
    if row.member and not row.reachable:
        return f"{label} (last known)"
    if row.state == "running" and row.adopted:
        return f"{label} (started outside PAIR)"
    return label


def state_colour(row: EngineRow) -> QColor:
    """The indicator colour of the state (amber while an action is pending, grey for a member
    that cannot be reached), in the shade of the application's palette."""
    if row.pending is not None:
        return look.state_colour(State.PENDING)
    if row.member and not row.reachable:
        return look.state_colour(State.IDLE)
    return look.state_colour(ROW_STATES[row.state])


def scheduler_text(row: EngineRow) -> str:
    """The card's scheduler line (``SCHEDULER_ROLE``): this node's engines only, and only while
    the scheduler has work, an exclusive operation or a turn."""
    return scheduler_line(row.scheduler) if row.local else ""


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
SCHEDULER_ROLE = ROW_ROLE + 6
_ROLES: dict[int, Role[EngineRow]] = {
    NODE_ROLE: Role(b"node", lambda r: r.node_id),
    ENGINE_ROLE: Role(b"engine", lambda r: r.engine),
    STATE_ROLE: Role(b"state", lambda r: r.state),
    PENDING_ROLE: Role(b"pending", lambda r: r.pending),
    READ_ONLY_ROLE: Role(b"readOnly", lambda r: r.read_only),
    SCHEDULER_ROLE: Role(b"scheduler", scheduler_text),
}


class EnginesModel(KeyedTableModel[EngineKey, EngineRow]):
    """Engines keyed by (node id, engine); ``ROW_ROLE`` gives the ``EngineRow``, the other
    roles its node, engine, raw state, pending verb, whether it is read-only and the scheduler
    line."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(COLUMNS, lambda row: row.key, parent, roles=_ROLES)

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
