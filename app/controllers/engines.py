"""The Engines page's controller: runs engine commands on this node or any member (each an
``EngineOp``) and the reads around them (this node's ``status``, versions, logs); what the page
shows is ``EngineDisplay``'s, fed by the engines and discovery stores into ``EnginesModel``.
This node's rows carry their engine's scheduler."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.controllers.engine_display import EngineDisplay
from app.controllers.engine_ops import (
    PENDING_TIMEOUTS_S,
    EngineOp,
    detect_installed,
    read_doors,
    read_logs,
    read_versions,
)
from app.models.engines import EngineCommand, EngineKey, EnginesModel, parse_port
from app.pending import PendingActions, PendingKey
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineStatus, MemberEngines

log = logging.getLogger(__name__)


class EnginesController(Controller):
    """Shows the engines store's statuses (this node's once ``status`` named it, and every
    member's), the discovery store's other computers, and runs engine commands on this node
    or, with ``node``, on a member. The settings store's pushes make this node's doors read
    again (a port may have moved). Owns the ``status``, command, versions, detection and log
    tasks."""

    logs_loaded = Signal(object, list)  # EngineKey, lines
    logs_failed = Signal(object, str)  # EngineKey, message
    problem_changed = Signal()
    nodes_changed = Signal()  # a member joined, left, was renamed or went (un)reachable

    def __init__(
        self,
        connection: BrokerConnection,
        model: EnginesModel,
        pending: PendingActions,
        engines: EnginesStore,
        discovery: DiscoveryStore,
        settings: SettingsStore,
        parent: QObject | None = None,
        *,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.pending = pending
        self.engines = engines
        self.discovery = discovery
        self.timeout_s = timeout_s
        self.display = EngineDisplay(
            model,
            pending,
            engines,
            discovery,
            ask_versions=self._ask_versions,
            ask_doors=self._refresh_doors,
            parent=self,
        )
        self.display.problem_changed.connect(self.problem_changed)
        self.display.nodes_changed.connect(self.nodes_changed)
        settings.pushed.connect(self._on_settings_pushed)
        self._session = 0  # answers from an older session are dropped
        self._reading: asyncio.Task[None] | None = None
        self._reading_doors: asyncio.Task[None] | None = None

    # -- reading -------------------------------------------------------------------------------

    @property
    def node_id(self) -> NodeId:
        """This node's id ("" until ``status`` named it)."""
        return self.display.node_id

    @property
    def problem(self) -> str | None:
        """Why this node's engines cannot be shown, if they cannot."""
        return self.display.problem

    def engine_key(self, engine: EngineName, node: NodeId | None = None) -> EngineKey:
        """The key of an engine of ``node`` (None or this node's id: this node)."""
        return (node or self.node_id, engine)

    def key(self, engine: EngineName, node: NodeId | None = None) -> PendingKey:
        """The pending-store key of an engine of ``node`` (None: this node)."""
        return PendingKey(*self.engine_key(engine, node))

    def status(self, key: EngineKey) -> EngineStatus | None:
        """The last known status of an engine of this node or of a member."""
        return self.display.status(key)

    def reachable(self, node: NodeId) -> bool:
        """Whether commands can reach ``node`` (this node, or a member whose link is up)."""
        return self.display.reachable(node)

    def members(self) -> list[MemberEngines]:
        """The other members, by name (once this node is known)."""
        return self.display.members()

    # -- commands ------------------------------------------------------------------------------

    def set_running(self, engine: EngineName, running: bool, node: NodeId | None = None) -> None:
        """The on/off switch: start or stop."""
        command = EngineCommand.START if running else EngineCommand.STOP
        self._command(self.engine_key(engine, node), command)

    def restart(self, engine: EngineName, node: NodeId | None = None) -> None:
        """Stop and start again."""
        self._command(self.engine_key(engine, node), EngineCommand.RESTART)

    def install(self, engine: EngineName, node: NodeId | None = None) -> None:
        """Download and install (progress arrives through the engines store)."""
        self._command(self.engine_key(engine, node), EngineCommand.INSTALL)

    def update(self, engine: EngineName, node: NodeId | None = None) -> None:
        """Install the latest version (progress arrives like an install's)."""
        self._command(self.engine_key(engine, node), EngineCommand.UPDATE)

    def set_port(self, engine: EngineName, text: str, node: NodeId | None = None) -> bool:
        """Move the engine to the typed port; a bad one is refused here, never sent."""
        key = self.engine_key(engine, node)
        status = self.status(key)
        if status is None:
            return False
        port = parse_port(text)
        if isinstance(port, str):
            self.display.show_port_error(key, port)
            self.display.publish(key)
            return False
        self.display.show_port_error(key, None)
        if port == status.port:  # the broker would restart a running engine for nothing
            self.display.publish(key)
            return True
        return self._command(key, EngineCommand.SET_PORT, port)

    def refresh_logs(self, engine: EngineName, node: NodeId | None = None) -> None:
        """Read the engine's recent output; ``logs_loaded`` or ``logs_failed`` follows."""
        key = self.engine_key(engine, node)
        self._tasks.spawn(self._read_logs(key), name=f"logs {engine} {key[0]}")

    def reload(self) -> None:
        """Read everything again (after a failure)."""
        self._start_reading()
        self.engines.resubscribe()

    def _wire_node(self, node: NodeId) -> NodeId | None:
        """``node`` as a call's parameter: none for this node."""
        return None if node == self.node_id else node

    def _command(self, key: EngineKey, command: EngineCommand, port: int | None = None) -> bool:
        timeout = self.timeout_s if self.timeout_s is not None else PENDING_TIMEOUTS_S[command]
        expect = self.display.begin(key, command, port, timeout)
        if expect is None:
            return False
        display = self.display
        EngineOp(key, command, self._wire_node(key[0]), port).run_in_background(
            self._tasks,
            self.connection,
            success=lambda: display.command_done(key, expect),
            failure=lambda message: display.command_failed(key, expect, message),
        )
        return True

    # -- the session and this node -------------------------------------------------------------

    def _on_connection_session_ready(self) -> None:
        self._start_reading()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is not None:
            return
        for task in (self._reading, self._reading_doors):
            if task is not None:
                task.cancel()
        self._session += 1
        self.display.end_session()

    def _start_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        self._reading = self._tasks.spawn(self._read_all(), name="read")

    async def _read_all(self) -> None:
        try:
            broker = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            broker = None  # the rows show without this node's name and doors
        self.display.identify(broker)
        await detect_installed(self.connection)

    def _on_settings_pushed(self) -> None:
        if self.display.identified:
            self._refresh_doors()  # a door's port may have changed

    def _refresh_doors(self) -> None:
        if self._reading_doors is None or self._reading_doors.done():
            self._reading_doors = self._tasks.spawn_if_running(self._read_doors(), name="doors")

    async def _read_doors(self) -> None:
        doors = await read_doors(self.connection)
        if doors is not None:
            self.display.show_doors(doors)

    def _ask_versions(self, key: EngineKey) -> bool:
        name = f"versions {key[1]} {key[0]}"
        return self._tasks.spawn_if_running(self._read_versions(key), name=name) is not None

    async def _read_versions(self, key: EngineKey) -> None:
        session = self._session
        versions = await read_versions(self.connection, key, self._wire_node(key[0]))
        if versions is not None and session == self._session:
            self.display.show_versions(key, versions)

    async def _read_logs(self, key: EngineKey) -> None:
        try:
            lines = await read_logs(self.connection, key, self._wire_node(key[0]))
        except RpcError as exc:
            self.logs_failed.emit(key, exc.message)
            return
        self.logs_loaded.emit(key, lines)
