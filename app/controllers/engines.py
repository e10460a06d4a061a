"""Keeps ``EnginesModel`` equal to this node's engines (the engines store) and other nodes'
running engines (the discovery store), and runs engine commands with optimistic pending state.

A click shows its verb at once through the shared ``PendingActions`` store. It clears on the
backend's truth: a state change that is the command's outcome (or an error state), a terminal
install-progress event, or the command's own answer (success or RPC error, whose message is
shown on the card). Otherwise the store's timeout ends it ("did not confirm in time"); a lost
session ends everything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.models.engines import (
    VERBS,
    EngineCommand,
    EngineRow,
    EnginesModel,
    Expectation,
    LocalExtras,
    confirms,
    door_ports,
    install_step,
    local_row,
    parse_port,
    remote_rows,
    timed_out,
)
from app.pending import DEFAULT_TIMEOUT_S, PendingActions, PendingKey
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    DiscoveredNode,
    EngineLogsQuery,
    EngineName,
    EngineRef,
    EngineSetPort,
    EngineState,
    EngineStatus,
    InstallProgress,
    NodeId,
)

log = logging.getLogger(__name__)

LOG_LINES = 500
# The commands' own answers come when the work is done: a start waits until the engine is
# ready (Ollama's manifest allows 600 s), an install until the download is unpacked.
COMMAND_CALL_TIMEOUT_S = 900.0
INSTALL_CALL_TIMEOUT_S = 3600.0

_METHODS: dict[EngineCommand, Method[EngineRef, EngineStatus]] = {
    EngineCommand.START: methods.ENGINE_START,
    EngineCommand.STOP: methods.ENGINE_STOP,
    EngineCommand.RESTART: methods.ENGINE_RESTART,
    EngineCommand.INSTALL: methods.ENGINE_INSTALL,
}


class EnginesController(Controller):
    """Shows the engines store's statuses (once ``status`` named this node) and the discovery
    store's other nodes, and runs this node's engine commands. Owns the ``status``, command,
    detection and log tasks."""

    logs_loaded = Signal(str, list)  # engine, lines
    logs_failed = Signal(str, str)  # engine, message
    problem_changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        model: EnginesModel,
        pending: PendingActions,
        engines: EnginesStore,
        discovery: DiscoveryStore,
        parent: QObject | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.pending = pending
        self.engines = engines
        self.discovery = discovery
        self.timeout_s = timeout_s
        self.node_id = NodeId("")
        self.node_name = "This computer"
        self.problem: str | None = None  # why this node's engines cannot be shown
        self._identified = False  # ``status`` was read in this session (rows wait for it)
        self._doors: dict[str, int] = {}
        self._states: dict[EngineName, EngineState] = {}  # as last seen, to spot a move on
        self._notices: dict[EngineName, str] = {}
        self._port_errors: dict[EngineName, str] = {}
        self._expectations: dict[EngineName, Expectation] = {}
        self._reading: asyncio.Task[None] | None = None
        self._reading_doors: asyncio.Task[None] | None = None
        self._follow_stores()

    def _follow_stores(self) -> None:
        self.pending.changed.connect(self._on_pending_changed)
        self.pending.expired.connect(self._on_pending_expired)
        self.engines.reset.connect(self._on_engines_reset)
        self.engines.failed.connect(self._on_engines_failed)
        self.engines.engine_changed.connect(self._on_engines_engine_changed)
        self.engines.install_progressed.connect(self._on_engines_install_progressed)
        self.discovery.reset.connect(self._on_discovery_reset)
        self.discovery.node_changed.connect(self._on_discovery_node_changed)
        self.discovery.node_removed.connect(self._on_discovery_node_removed)

    # -- commands ------------------------------------------------------------------------------

    def set_running(self, engine: EngineName, running: bool) -> None:
        """The on/off switch: start or stop."""
        self._command(engine, EngineCommand.START if running else EngineCommand.STOP)

    def restart(self, engine: EngineName) -> None:
        """Stop and start again."""
        self._command(engine, EngineCommand.RESTART)

    def install(self, engine: EngineName) -> None:
        """Download and install (progress arrives through the engines store)."""
        self._command(engine, EngineCommand.INSTALL)

    def set_port(self, engine: EngineName, text: str) -> bool:
        """Move the engine to the typed port; a bad one is refused here, never sent."""
        status = self.engines.status(engine)
        if status is None:
            return False
        port = parse_port(text)
        if isinstance(port, str):
            self._port_errors[engine] = port
            self._publish(engine)
            return False
        self._port_errors.pop(engine, None)
        if port == status.port:  # the broker would restart a running engine for nothing
            self._publish(engine)
            return True
        return self._command(engine, EngineCommand.SET_PORT, port)

    def refresh_logs(self, engine: EngineName) -> None:
        """Read the engine's recent output; ``logs_loaded`` or ``logs_failed`` follows."""
        self._tasks.spawn(self._read_logs(engine), name=f"logs {engine}")

    def reload(self) -> None:
        """Read everything again (after a failure)."""
        self._start_reading()
        self.engines.resubscribe()

    def key(self, engine: EngineName) -> PendingKey:
        """The pending-store key of one of this node's engines."""
        return PendingKey(self.node_id, engine)

    def _command(self, engine: EngineName, command: EngineCommand, port: int | None = None) -> bool:
        status = self.engines.status(engine)
        key = self.key(engine)
        if status is None or self.pending.get(key) is not None:
            return False
        self._notices.pop(engine, None)
        expect = Expectation(command, status.revision, port)
        self._expectations[engine] = expect
        self.pending.begin(key, VERBS[command], self.timeout_s)  # shown at once
        request = self._request(engine, command, port)
        self._tasks.spawn(self._send(engine, expect, request), name=f"{command} {engine}")
        return True

    def _request(
        self, engine: EngineName, command: EngineCommand, port: int | None
    ) -> Coroutine[Any, Any, EngineStatus]:
        install = command is EngineCommand.INSTALL
        timeout = INSTALL_CALL_TIMEOUT_S if install else COMMAND_CALL_TIMEOUT_S
        if command is EngineCommand.SET_PORT and port is not None:
            params = EngineSetPort(engine=engine, port=port)
            return self.connection.call(methods.ENGINE_SET_PORT, params, timeout)
        return self.connection.call(_METHODS[command], EngineRef(engine=engine), timeout)

    async def _send(
        self, engine: EngineName, expect: Expectation, request: Coroutine[Any, Any, EngineStatus]
    ) -> None:
        try:
            # The state it led to arrives as engine events first; the answer ends the command.
            await request
        except RpcError as exc:
            log.info("engine %s %s failed: %s", engine, expect.command, exc)
            self._failed(engine, expect, exc.message)
            return
        self._done(engine, expect)

    def _failed(self, engine: EngineName, expect: Expectation, message: str) -> None:
        if self._expectations.get(engine) is not expect:
            return
        if expect.command is EngineCommand.SET_PORT:
            self._port_errors[engine] = message
        else:
            self._notices[engine] = f"Could not {expect.command}: {message}"
        self._done(engine, expect, keep_notice=True)

    def _done(self, engine: EngineName, expect: Expectation, *, keep_notice: bool = False) -> None:
        """The command's outcome is known: drop its pending state and its expectation."""
        if self._expectations.get(engine) is not expect:
            return  # the session ended or a newer command replaced this one
        del self._expectations[engine]
        if expect.expired and not keep_notice:
            self._notices.pop(engine, None)
        if not self.pending.settle(self.key(engine)):
            self._publish(engine)

    # -- this node's engines -------------------------------------------------------------------

    def _on_connection_session_ready(self) -> None:
        self._start_reading()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is not None:
            return
        for task in (self._reading, self._reading_doors):
            if task is not None:
                task.cancel()
        self._forget_session()
        self.pending.clear_all()
        self.model.reset([])
        self.problem_changed.emit()

    def _forget_session(self) -> None:
        self.node_id, self._identified, self._doors = NodeId(""), False, {}
        self._states, self._notices, self._port_errors = {}, {}, {}
        self._expectations = {}
        self.problem = None

    def _start_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        self._reading = self._tasks.spawn(self._read_all(), name="read")

    async def _read_all(self) -> None:
        try:
            broker = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
        else:
            self.node_id, self.node_name = broker.node_id, broker.node_name
            self._doors = door_ports(broker.front_doors)
        self._identified = True
        self._show_local()
        self._on_discovery_reset()  # the node id tells this node's entry apart
        try:
            # Detection runs again, so an engine installed outside PAIR since the broker
            # started shows as installed (the change arrives as an engine event).
            await self.connection.call(methods.ENGINE_GET_INSTALLED)
        except RpcError as exc:
            log.info("engine:get-installed failed: %s", exc)

    def _show_local(self) -> None:
        if self._identified:
            statuses = self.engines.statuses.values()
            self.model.sync_node(self.node_id, [self._row(status) for status in statuses])

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            self.problem = problem
            self.problem_changed.emit()

    def _on_engines_reset(self) -> None:
        self._set_problem(None)
        for status in self.engines.statuses.values():
            self._note_status(status)
        self._show_local()

    def _on_engines_failed(self, message: str) -> None:
        self._set_problem(f"This computer's engines cannot be shown: {message}")

    def _on_engines_engine_changed(self, engine: EngineName) -> None:
        status = self.engines.status(engine)
        if status is None:
            return
        self._note_status(status)
        self._publish(engine)
        if status.state == "running" and status.front_door not in self._doors:
            self._refresh_doors()

    def _note_status(self, status: EngineStatus) -> None:
        """Settle the command ``status`` is the outcome of; drop a notice the engine moved past."""
        engine = status.engine
        previous = self._states.get(engine)
        self._states[engine] = status.state
        expect = self._expectations.get(engine)
        if expect is not None and confirms(expect, status):
            self._done(engine, expect)
        elif expect is None and previous is not None and previous != status.state:
            self._notices.pop(engine, None)  # the engine moved on: the old notice is stale

    def _on_engines_install_progressed(self, progress: InstallProgress) -> None:
        engine = progress.engine
        if not progress.done:
            self.pending.extend(self.key(engine))  # still alive: restart the safety timeout
        if progress.error:
            self._notices[engine] = f"Install failed: {progress.error}"
        expect = self._expectations.get(engine)
        if progress.done and expect is not None and expect.command is EngineCommand.INSTALL:
            self._done(engine, expect, keep_notice=progress.error is not None)
        else:
            self._publish(engine)

    def _refresh_doors(self) -> None:
        if self._reading_doors is None or self._reading_doors.done():
            self._reading_doors = self._tasks.spawn(self._read_doors(), name="doors")

    async def _read_doors(self) -> None:
        try:
            broker = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        if door_ports(broker.front_doors) != self._doors:
            self._doors = door_ports(broker.front_doors)
            self._show_local()

    def _on_pending_changed(self, key: PendingKey) -> None:
        if key.node == self.node_id and not key.model:
            self._publish(key.engine)

    def _on_pending_expired(self, key: PendingKey) -> None:
        if key.node != self.node_id or key.model:
            return
        expect = self._expectations.get(key.engine)
        if expect is not None:
            expect.expired = True
            self._notices[key.engine] = timed_out(VERBS[expect.command])
            self._publish(key.engine)

    def _row(self, status: EngineStatus) -> EngineRow:
        engine = status.engine
        install = self.engines.installs.get(engine)
        extras = LocalExtras(
            pending=self.pending.action(self.key(engine)),
            notice=self._notices.get(engine),
            port_error=self._port_errors.get(engine),
            install=install_step(install) if install is not None else None,
        )
        return local_row(self.node_id, self.node_name, status, self._doors, extras)

    def _publish(self, engine: EngineName) -> None:
        status = self.engines.status(engine)
        if status is not None and self._identified:
            self.model.upsert(self._row(status))

    async def _read_logs(self, engine: EngineName) -> None:
        query = EngineLogsQuery(engine=engine, lines=LOG_LINES)
        try:
            logs = await self.connection.call(methods.ENGINE_LOGS, query)
        except RpcError as exc:
            self.logs_failed.emit(engine, exc.message)
            return
        self.logs_loaded.emit(engine, logs.lines)

    # -- other nodes ---------------------------------------------------------------------------

    def _on_discovery_reset(self) -> None:
        nodes = [node for node in self.discovery.nodes.values() if not self._is_self(node)]
        shown = {row.node_id for row in self.model.rows() if not row.local}
        for gone in shown - {node.node_id for node in nodes}:
            self.model.sync_node(gone, [])
        for node in nodes:
            self.model.sync_node(node.node_id, remote_rows(node))

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None and not self._is_self(node):
            self.model.sync_node(node_id, remote_rows(node))

    def _on_discovery_node_removed(self, node_id: NodeId) -> None:
        if node_id != self.node_id:
            self.model.sync_node(node_id, [])

    def _is_self(self, node: DiscoveredNode) -> bool:
        return is_self(node) or node.node_id == self.node_id
