"""Keeps ``EnginesModel`` equal to this node's engines and other nodes' running engines, and runs
engine commands with optimistic pending state.

A click shows its verb at once through the shared ``PendingActions`` store. It clears on the
backend's truth: a state change that is the command's outcome (or an error state), a terminal
install-progress push, or the command's own answer (success or RPC error, whose message is
shown on the card). Otherwise the store's timeout ends it ("did not confirm in time"); a lost
session ends everything.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode
from app.controllers.subscription import NumberedSubscription
from app.models.engines import (
    VERBS,
    EngineCommand,
    EngineRow,
    EnginesModel,
    Expectation,
    InstallStep,
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
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    BrokerStatus,
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    EngineLogs,
    EngineStatus,
    InstallProgress,
)

log = logging.getLogger(__name__)

LOG_LINES = 500
# The commands' own answers come when the work is done: a start waits until the engine is
# ready (Ollama's manifest allows 600 s), an install until the download is unpacked.
COMMAND_CALL_TIMEOUT_S = 900.0
INSTALL_CALL_TIMEOUT_S = 3600.0

_METHODS: dict[EngineCommand, str] = {
    EngineCommand.START: methods.ENGINE_START,
    EngineCommand.STOP: methods.ENGINE_STOP,
    EngineCommand.RESTART: methods.ENGINE_RESTART,
    EngineCommand.INSTALL: methods.ENGINE_INSTALL,
    EngineCommand.SET_PORT: methods.ENGINE_SET_PORT,
}


class EnginesController(Controller):
    """Reads this node's engines and follows their pushes, follows discovery for other nodes'
    engines, and runs this node's engine commands. Owns the snapshot, command and log tasks."""

    logs_loaded = Signal(str, list)  # engine, lines
    logs_failed = Signal(str, str)  # engine, message
    problem_changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        model: EnginesModel,
        pending: PendingActions,
        parent: QObject | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.pending = pending
        self.timeout_s = timeout_s
        self.node_id = ""
        self.node_name = "This computer"
        self.problem: str | None = None  # why this node's engines cannot be shown
        self._doors: dict[str, int] = {}
        self._statuses: dict[str, EngineStatus] = {}
        self._early: list[EngineStatus] | None = None  # pushes that overtook the snapshot
        self._notices: dict[str, str] = {}
        self._port_errors: dict[str, str] = {}
        self._installs: dict[str, InstallStep] = {}
        self._expectations: dict[str, Expectation] = {}
        self._nodes: dict[str, DiscoveredNode] = {}
        self._discovery = NumberedSubscription(
            self._tasks,
            connection,
            methods.DISCOVERY_SUBSCRIBE,
            DiscoverySnapshot,
            DiscoveryEvent,
            on_snapshot=self._show_nodes,
            on_event=self._apply_discovery_event,
        )
        self._reading: asyncio.Task[None] | None = None
        self._reading_doors: asyncio.Task[None] | None = None
        pending.changed.connect(self._on_pending_changed)
        pending.expired.connect(self._on_pending_expired)

    # -- commands ------------------------------------------------------------------------------

    def set_running(self, engine: str, running: bool) -> None:
        """The on/off switch: start or stop."""
        self._command(engine, EngineCommand.START if running else EngineCommand.STOP)

    def restart(self, engine: str) -> None:
        """Stop and start again."""
        self._command(engine, EngineCommand.RESTART)

    def install(self, engine: str) -> None:
        """Download and install (progress arrives as pushes)."""
        self._command(engine, EngineCommand.INSTALL)

    def set_port(self, engine: str, text: str) -> bool:
        """Move the engine to the typed port; a bad one is refused here, never sent."""
        status = self._statuses.get(engine)
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

    def refresh_logs(self, engine: str) -> None:
        """Read the engine's recent output; ``logs_loaded`` or ``logs_failed`` follows."""
        self._tasks.spawn(self._read_logs(engine), name=f"logs {engine}")

    def reload(self) -> None:
        """Read everything again (after a failure)."""
        self._start_reading()

    def key(self, engine: str) -> PendingKey:
        """The pending-store key of one of this node's engines."""
        return PendingKey(self.node_id, engine)

    def _command(self, engine: str, command: EngineCommand, port: int | None = None) -> bool:
        status = self._statuses.get(engine)
        key = self.key(engine)
        if status is None or self.pending.get(key) is not None:
            return False
        self._notices.pop(engine, None)
        expect = Expectation(command, status.revision, port)
        self._expectations[engine] = expect
        params: dict[str, Any] = {"engine": engine}
        if port is not None:
            params["port"] = port
        self.pending.begin(key, VERBS[command], self.timeout_s)  # shown at once
        self._tasks.spawn(self._send(engine, expect, params), name=f"{command} {engine}")
        return True

    async def _send(self, engine: str, expect: Expectation, params: dict[str, Any]) -> None:
        install = expect.command is EngineCommand.INSTALL
        timeout = INSTALL_CALL_TIMEOUT_S if install else COMMAND_CALL_TIMEOUT_S
        try:
            raw = await self.connection.call(_METHODS[expect.command], params, timeout)
        except RpcError as exc:
            log.info("engine %s %s failed: %s", engine, expect.command, exc)
            self._failed(engine, expect, exc.message)
            return
        if self._expectations.get(engine) is not expect:
            return  # the session ended or a newer command replaced this one
        status = decode(raw, EngineStatus)
        known = self._statuses.get(engine)
        # A push that overtook this answer (a crash right after the start) is newer: keep it.
        if status is not None and (known is None or status.revision >= known.revision):
            self._apply_status(status)
        self._done(engine, expect)

    def _failed(self, engine: str, expect: Expectation, message: str) -> None:
        if self._expectations.get(engine) is not expect:
            return
        if expect.command is EngineCommand.SET_PORT:
            self._port_errors[engine] = message
        else:
            self._notices[engine] = f"Could not {expect.command}: {message}"
        self._done(engine, expect, keep_notice=True)

    def _done(self, engine: str, expect: Expectation, *, keep_notice: bool = False) -> None:
        """The command's outcome is known: drop its pending state and its expectation."""
        if self._expectations.get(engine) is expect:
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
        self._discovery.reset()
        self._forget_session()
        self.pending.clear_all()
        self.model.reset([])
        self.problem_changed.emit()

    def _forget_session(self) -> None:
        self._statuses, self._doors, self._nodes = {}, {}, {}
        self._notices, self._port_errors, self._installs = {}, {}, {}
        self._expectations = {}
        self._early = None
        self.problem = None

    def _start_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        self._discovery.reset()
        self._early = []
        self._reading = self._tasks.spawn(self._read_all(), name="read")

    async def _read_all(self) -> None:
        await self._read_broker_status()
        await self._read_engines()
        self._discovery.start()

    async def _read_broker_status(self) -> None:
        try:
            broker = decode(await self.connection.call(methods.STATUS), BrokerStatus)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        if broker is not None:
            self.node_id, self.node_name = broker.node_id, broker.node_name
            self._doors = door_ports(broker.front_doors)

    async def _read_engines(self) -> None:
        try:
            # Detection runs again, so an engine installed outside PAIR since the broker
            # started shows as installed.
            await self.connection.call(methods.ENGINE_GET_INSTALLED)
            raw = await self.connection.call(methods.ENGINE_STATUS, {})
        except RpcError as exc:
            log.info("engine:status failed: %s", exc)
            self._set_problem(f"This computer's engines cannot be shown: {exc.message}")
            self._apply_early()
            return
        statuses = decode(raw, list[EngineStatus]) or []
        self._statuses = {status.engine: status for status in statuses}
        self._set_problem(None)
        self.model.sync_node(self.node_id, [self._row(status) for status in statuses])
        self._apply_early()

    def _apply_early(self) -> None:
        early, self._early = self._early or [], None
        for status in early:
            known = self._statuses.get(status.engine)
            if known is None or status.revision > known.revision:
                self._apply_status(status)

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            self.problem = problem
            self.problem_changed.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.ENGINE_STATE_CHANGED:
            status = decode(params, EngineStatus)
            if status is None:
                return
            if self._early is not None:
                self._early.append(status)
            else:
                self._apply_status(status)
        elif method == methods.ENGINE_INSTALL_PROGRESS:
            progress = decode(params, InstallProgress)
            if progress is not None and progress.engine in self._statuses:
                self._apply_install_progress(progress)
        elif method == methods.DISCOVERY_EVENT:
            self._discovery.feed(params)

    def _apply_status(self, status: EngineStatus) -> None:
        engine = status.engine
        previous = self._statuses.get(engine)
        self._statuses[engine] = status
        self._set_problem(None)
        expect = self._expectations.get(engine)
        if expect is not None and confirms(expect, status):
            self._done(engine, expect)
        elif expect is None and previous is not None and previous.state != status.state:
            self._notices.pop(engine, None)  # the engine moved on: the old notice is stale
        self._publish(engine)
        if status.state == "running" and status.front_door not in self._doors:
            self._refresh_doors()

    def _apply_install_progress(self, progress: InstallProgress) -> None:
        engine = progress.engine
        step = install_step(progress)
        if step is None:
            self._installs.pop(engine, None)
        else:
            self._installs[engine] = step
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
            broker = decode(await self.connection.call(methods.STATUS), BrokerStatus)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        if broker is not None and door_ports(broker.front_doors) != self._doors:
            self._doors = door_ports(broker.front_doors)
            for engine in self._statuses:
                self._publish(engine)

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
        extras = LocalExtras(
            pending=self.pending.action(self.key(engine)),
            notice=self._notices.get(engine),
            port_error=self._port_errors.get(engine),
            install=self._installs.get(engine),
        )
        return local_row(self.node_id, self.node_name, status, self._doors, extras)

    def _publish(self, engine: str) -> None:
        status = self._statuses.get(engine)
        if status is not None and self._early is None:
            self.model.upsert(self._row(status))

    async def _read_logs(self, engine: str) -> None:
        try:
            raw = await self.connection.call(
                methods.ENGINE_LOGS, {"engine": engine, "lines": LOG_LINES}
            )
        except RpcError as exc:
            self.logs_failed.emit(engine, exc.message)
            return
        logs = decode(raw, EngineLogs)
        if logs is None:
            self.logs_failed.emit(engine, "The service sent an answer this app does not read.")
        else:
            self.logs_loaded.emit(engine, logs.lines)

    # -- other nodes ---------------------------------------------------------------------------

    def _show_nodes(self, snapshot: DiscoverySnapshot) -> None:
        nodes = {node.node_id: node for node in snapshot.nodes if not self._is_self(node)}
        for gone in set(self._nodes) - set(nodes):
            self.model.sync_node(gone, [])
        self._nodes = {}
        for node in nodes.values():
            self._put_node(node)

    def _apply_discovery_event(self, event: DiscoveryEvent) -> None:
        if event.event == "node_left":
            self._nodes.pop(event.node_id, None)
            self.model.sync_node(event.node_id, [])
        elif event.node is not None and not self._is_self(event.node):
            self._put_node(event.node)

    def _put_node(self, node: DiscoveredNode) -> None:
        self._nodes[node.node_id] = node
        self.model.sync_node(node.node_id, remote_rows(node))

    def _is_self(self, node: DiscoveredNode) -> bool:
        return "self" in node.sources or node.node_id == self.node_id
