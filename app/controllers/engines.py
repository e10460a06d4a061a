"""Keeps ``EnginesModel`` equal to the engines of this node and of the other cluster members (the
engines store) and to the engines other computers report (the discovery store, read-only), and
runs engine commands on any member with optimistic pending state. This node's rows carry their
engine's scheduler; a ``scheduler_changed`` repaints only the rows whose scheduler changed.

A click shows its verb at once through the shared ``PendingActions`` store, keyed by node and
engine. It clears on the backend's truth: a state change that is the command's outcome (or an
error state), for another member its state in a ``member_changed`` event; a terminal install
or update progress step; or the command's own answer (success or RPC error, whose message is
shown on the card). Otherwise the store's timeout ends it ("did not confirm in time"); a member
that cannot be reached or leaves ends its own; a lost session ends everything.
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
    EngineKey,
    EngineRow,
    EnginesModel,
    Expectation,
    Host,
    RowExtras,
    confirms,
    door_ports,
    engine_order,
    install_step,
    managed_row,
    member_doors,
    parse_port,
    remote_rows,
    timed_out,
)
from app.pending import BACKEND, PendingActions, PendingKey, call_timeout, pending_timeout
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    EngineLogsQuery,
    EngineName,
    EngineRef,
    EngineSetPort,
    EngineState,
    EngineStatus,
    EngineVersions,
    InstallProgress,
    MemberEngines,
    NodeId,
)

log = logging.getLogger(__name__)

LOG_LINES = 500
# The commands' own answers come when the work is done: a start waits until the engine is
# ready, an install or update until the download is unpacked and the engine started again.
COMMAND_CALL_TIMEOUT_S = call_timeout(BACKEND.engine_restart)
INSTALL_CALL_TIMEOUT_S = 3600.0
# How long each command's pending mark waits for the backend's truth; for an install or an
# update, how long it waits without a sign of progress (the last step restarts the engine).
PENDING_TIMEOUTS_S: dict[EngineCommand, float] = {
    EngineCommand.START: pending_timeout(BACKEND.engine_start),
    EngineCommand.STOP: pending_timeout(BACKEND.engine_stop),
    EngineCommand.RESTART: pending_timeout(BACKEND.engine_restart),
    EngineCommand.SET_PORT: pending_timeout(BACKEND.engine_restart),
    EngineCommand.INSTALL: pending_timeout(BACKEND.engine_restart),
    EngineCommand.UPDATE: pending_timeout(BACKEND.engine_restart),
}
VERSIONS_CALL_TIMEOUT_S = 40.0  # the broker asks the release feed with a 10 s bound

_METHODS: dict[EngineCommand, Method[EngineRef, EngineStatus]] = {
    EngineCommand.START: methods.ENGINE_START,
    EngineCommand.STOP: methods.ENGINE_STOP,
    EngineCommand.RESTART: methods.ENGINE_RESTART,
    EngineCommand.INSTALL: methods.ENGINE_INSTALL,
    EngineCommand.UPDATE: methods.ENGINE_UPDATE,
}
_WITH_PROGRESS = (EngineCommand.INSTALL, EngineCommand.UPDATE)
MemberView = tuple[str, bool, str | None, bool]  # name, reachable, error, has engines


class EnginesController(Controller):
    """Shows the engines store's statuses (this node's once ``status`` named it, and every
    member's), the discovery store's other computers, and runs engine commands on this node
    or, with ``node``, on a member. Owns the ``status``, command, versions, detection and log
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
        self.node_id = NodeId("")
        self.node_name = "This computer"
        self.problem: str | None = None  # why this node's engines cannot be shown
        self._identified = False  # ``status`` was read in this session (rows wait for it)
        self._session = 0  # answers from an older session are dropped
        self._doors: dict[str, int] = {}
        self._states: dict[EngineKey, EngineState] = {}  # as last seen, to spot a move on
        self._notices: dict[EngineKey, str] = {}
        self._port_errors: dict[EngineKey, str] = {}
        self._expectations: dict[EngineKey, Expectation] = {}
        self._versions: dict[EngineKey, EngineVersions] = {}
        self._asked: set[EngineKey] = set()  # versions read (or being read) in this session
        self._members_shown: dict[NodeId, MemberView] = {}
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
        self.engines.member_changed.connect(self._on_engines_member_changed)
        self.engines.scheduler_changed.connect(self._on_engines_scheduler_changed)
        self.discovery.reset.connect(self._on_discovery_reset)
        self.discovery.node_changed.connect(self._on_discovery_node_changed)
        self.discovery.node_removed.connect(self._on_discovery_node_removed)

    # -- reading -------------------------------------------------------------------------------

    def engine_key(self, engine: EngineName, node: NodeId | None = None) -> EngineKey:
        """The key of an engine of ``node`` (None or this node's id: this node)."""
        return (node or self.node_id, engine)

    def key(self, engine: EngineName, node: NodeId | None = None) -> PendingKey:
        """The pending-store key of an engine of ``node`` (None: this node)."""
        return PendingKey(*self.engine_key(engine, node))

    def status(self, key: EngineKey) -> EngineStatus | None:
        """The last known status of an engine of this node or of a member."""
        node, engine = key
        if node == self.node_id:
            return self.engines.status(engine)
        member = self.engines.members.get(node)
        if member is None:
            return None
        return next((status for status in member.engines if status.engine == engine), None)

    def reachable(self, node: NodeId) -> bool:
        """Whether commands can reach ``node`` (this node, or a member whose link is up)."""
        member = self.engines.members.get(node)
        return node == self.node_id or (member is not None and member.reachable)

    def members(self) -> list[MemberEngines]:
        """The other members, by name (once this node is known)."""
        if not self._identified:
            return []
        others = (m for m in self.engines.members.values() if m.node_id != self.node_id)
        return sorted(others, key=lambda member: (member.name.casefold(), member.node_id))

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
            self._port_errors[key] = port
            self._publish(key)
            return False
        self._port_errors.pop(key, None)
        if port == status.port:  # the broker would restart a running engine for nothing
            self._publish(key)
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
        status = self.status(key)
        pending_key = PendingKey(*key)
        busy = self.pending.get(pending_key) is not None
        if status is None or busy or not self.reachable(key[0]):
            return False
        self._notices.pop(key, None)
        expect = Expectation(command, status.revision, port)
        self._expectations[key] = expect
        timeout = self.timeout_s if self.timeout_s is not None else PENDING_TIMEOUTS_S[command]
        self.pending.begin(pending_key, VERBS[command], timeout)  # shown at once
        request = self._request(key, command, port)
        self._tasks.spawn(self._send(key, expect, request), name=f"{command} {key[1]} {key[0]}")
        return True

    def _request(
        self, key: EngineKey, command: EngineCommand, port: int | None
    ) -> Coroutine[Any, Any, EngineStatus]:
        node, engine = self._wire_node(key[0]), key[1]
        timeout = INSTALL_CALL_TIMEOUT_S if command in _WITH_PROGRESS else COMMAND_CALL_TIMEOUT_S
        if command is EngineCommand.SET_PORT and port is not None:
            params = EngineSetPort(engine=engine, port=port, node=node)
            return self.connection.call(methods.ENGINE_SET_PORT, params, timeout)
        ref = EngineRef(engine=engine, node=node)
        return self.connection.call(_METHODS[command], ref, timeout)

    async def _send(
        self, key: EngineKey, expect: Expectation, request: Coroutine[Any, Any, EngineStatus]
    ) -> None:
        try:
            # The state it led to arrives as engine events first; the answer ends the command.
            await request
        except RpcError as exc:
            log.info("engine %s %s on %s failed: %s", key[1], expect.command, key[0], exc)
            self._failed(key, expect, exc.message)
            return
        self._done(key, expect)

    def _failed(self, key: EngineKey, expect: Expectation, message: str) -> None:
        if self._expectations.get(key) is not expect:
            return
        if expect.command is EngineCommand.SET_PORT:
            self._port_errors[key] = message
        else:
            self._notices[key] = f"Could not {expect.command}: {message}"
        self._done(key, expect, keep_notice=True)

    def _done(self, key: EngineKey, expect: Expectation, *, keep_notice: bool = False) -> None:
        """The command's outcome is known: drop its pending state and its expectation."""
        if self._expectations.get(key) is not expect:
            return  # the session ended or a newer command replaced this one
        del self._expectations[key]
        if expect.expired and not keep_notice:
            self._notices.pop(key, None)
        if expect.command in _WITH_PROGRESS:  # a new version is installed: read it again
            self._asked.discard(key)
            self._want_versions(key)
        if not self.pending.settle(PendingKey(*key)):
            self._publish(key)

    # -- the session and this node -------------------------------------------------------------

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
        self.nodes_changed.emit()

    def _forget_session(self) -> None:
        self.node_id, self._identified, self._doors = NodeId(""), False, {}
        self._session += 1
        self._states, self._notices, self._port_errors = {}, {}, {}
        self._expectations, self._versions, self._asked = {}, {}, set()
        self._members_shown = {}
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
        self._note_everything()
        self._show_all()
        try:
            # Detection runs again, so an engine installed outside PAIR since the broker
            # started shows as installed (the change arrives as an engine event).
            await self.connection.call(methods.ENGINE_GET_INSTALLED)
        except RpcError as exc:
            log.info("engine:get-installed failed: %s", exc)

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            self.problem = problem
            self.problem_changed.emit()

    def _on_engines_reset(self) -> None:
        self._set_problem(None)
        self._note_everything()
        self._show_all()

    def _on_engines_failed(self, message: str) -> None:
        self._set_problem(f"This computer's engines cannot be shown: {message}")

    def _note_everything(self) -> None:
        """A snapshot (or this node's id) arrived: check every engine against what is pending."""
        if not self._identified:
            return
        for status in self.engines.statuses.values():
            self._note_status((self.node_id, status.engine), status)
        members = self.engines.members
        for node in {key[0] for key in self._states} - set(members) - {self.node_id}:
            self._forget_node(node)
        for member in members.values():
            self._note_member(member)

    def _on_engines_engine_changed(self, engine: EngineName) -> None:
        status = self.engines.status(engine)
        if status is None or not self._identified:
            return  # once identified, every status is checked
        key = (self.node_id, engine)
        self._note_status(key, status)
        self._publish(key)
        if status.state == "running" and status.front_door not in self._doors:
            self._refresh_doors()

    def _note_status(self, key: EngineKey, status: EngineStatus) -> None:
        """Settle the command ``status`` is the outcome of; drop a notice the engine moved past."""
        previous = self._states.get(key)
        self._states[key] = status.state
        expect = self._expectations.get(key)
        if expect is not None and confirms(expect, status):
            self._done(key, expect)
        elif expect is None and previous is not None and previous != status.state:
            self._notices.pop(key, None)  # the engine moved on: the old notice is stale
        if status.installed:
            self._want_versions(key)

    def _on_engines_install_progressed(self, progress: InstallProgress) -> None:
        if not self._identified:
            return
        key = (self.node_id, progress.engine)
        if not self._note_install(key, progress):
            self._publish(key)

    def _note_install(self, key: EngineKey, progress: InstallProgress) -> bool:
        """Apply one install or update step; True when it ended the command (and published)."""
        expect = self._expectations.get(key)
        if not progress.done:
            self.pending.extend(PendingKey(*key))  # still alive: restart the safety timeout
        if progress.error:
            updating = expect is not None and expect.command is EngineCommand.UPDATE
            self._notices[key] = f"{'Update' if updating else 'Install'} failed: {progress.error}"
        if progress.done and expect is not None and expect.command in _WITH_PROGRESS:
            self._done(key, expect, keep_notice=progress.error is not None)
            return True
        return False

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.SETTINGS_CHANGED.name and self._identified:
            self._refresh_doors()  # a door's port may have changed

    def _refresh_doors(self) -> None:
        if self._reading_doors is None or self._reading_doors.done():
            self._reading_doors = self._tasks.spawn_if_running(self._read_doors(), name="doors")

    async def _read_doors(self) -> None:
        try:
            broker = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        if door_ports(broker.front_doors) != self._doors:
            self._doors = door_ports(broker.front_doors)
            self._show_node(self.node_id)

    def _on_engines_scheduler_changed(self) -> None:
        """New schedulers of this node's engines: repaint the rows whose scheduler changed."""
        if not self._identified:
            return
        for row in self.model.node_rows(self.node_id):
            if row.scheduler != self.engines.scheduler(row.engine):
                self._publish(row.key)

    # -- other members -------------------------------------------------------------------------

    def _on_engines_member_changed(self, node_id: NodeId) -> None:
        if not self._identified or node_id == self.node_id:
            return
        member = self.engines.members.get(node_id)
        if member is None:
            self._forget_node(node_id)
        else:
            self._note_member(member)
        self._show_node(node_id)
        self._check_members()

    def _note_member(self, member: MemberEngines) -> None:
        """A member's whole state arrived: its truth settles (or, unreachable, ends) its
        commands."""
        node = member.node_id
        if not member.reachable:
            for key in [key for key in self._expectations if key[0] == node]:
                del self._expectations[key]
            self.pending.settle_node(node)  # nothing there can be confirmed while it is away
            self._asked = {key for key in self._asked if key[0] != node}  # ask once it is back
            return
        for status in member.engines:
            self._note_status((node, status.engine), status)
        for progress in member.installs:
            self._note_install((node, progress.engine), progress)

    def _forget_node(self, node: NodeId) -> None:
        """``node`` is no longer a member: drop what this controller kept about it."""
        for kept in (self._states, self._notices, self._port_errors, self._versions):
            for key in [key for key in kept if key[0] == node]:
                del kept[key]
        self._expectations = {k: e for k, e in self._expectations.items() if k[0] != node}
        self._asked = {key for key in self._asked if key[0] != node}
        self.pending.settle_node(node)

    def _check_members(self) -> None:
        shown: dict[NodeId, MemberView] = {
            member.node_id: (member.name, member.reachable, member.error, bool(member.engines))
            for member in self.members()
        }
        if shown != self._members_shown:
            self._members_shown = shown
            self.nodes_changed.emit()

    def _want_versions(self, key: EngineKey) -> None:
        if self._identified and key not in self._asked and self.reachable(key[0]):
            name = f"versions {key[1]} {key[0]}"
            if self._tasks.spawn_if_running(self._read_versions(key), name=name) is not None:
                self._asked.add(key)

    async def _read_versions(self, key: EngineKey) -> None:
        session = self._session
        ref = EngineRef(engine=key[1], node=self._wire_node(key[0]))
        try:
            versions = await self.connection.call(
                methods.ENGINE_VERSIONS, ref, VERSIONS_CALL_TIMEOUT_S
            )
        except RpcError as exc:
            log.info("engine:versions of %s on %s failed: %s", key[1], key[0], exc)
            return
        if session == self._session and versions != self._versions.get(key):
            self._versions[key] = versions
            self._publish(key)

    # -- rows ----------------------------------------------------------------------------------

    def _on_pending_changed(self, key: PendingKey) -> None:
        if not key.model:
            self._publish((key.node, key.engine))

    def _on_pending_expired(self, key: PendingKey) -> None:
        engine_key = (key.node, key.engine)
        expect = self._expectations.get(engine_key)
        if key.model or expect is None:
            return
        expect.expired = True
        self._notices[engine_key] = timed_out(VERBS[expect.command])
        self._publish(engine_key)

    def _host(self, node: NodeId) -> Host:
        if node == self.node_id:
            return Host(node, self.node_name, local=True, doors=self._doors)
        member = self.engines.members.get(node)
        doors, address = member_doors(self.discovery.node(node))
        name, reachable = (member.name, member.reachable) if member else (node[:8], False)
        return Host(node, name, local=False, reachable=reachable, doors=doors, address=address)

    def _install_of(self, key: EngineKey) -> InstallProgress | None:
        node, engine = key
        if node == self.node_id:
            return self.engines.installs.get(engine)
        member = self.engines.members.get(node)
        installs = member.installs if member is not None else []
        return next((i for i in installs if i.engine == engine and not i.done), None)

    def _row(self, key: EngineKey, status: EngineStatus, host: Host) -> EngineRow:
        install = self._install_of(key)
        extras = RowExtras(
            pending=self.pending.action(PendingKey(*key)),
            notice=self._notices.get(key),
            port_error=self._port_errors.get(key),
            install=install_step(install) if install is not None else None,
            versions=self._versions.get(key),
            scheduler=self.engines.scheduler(key[1]) if host.local else None,
        )
        return managed_row(host, status, extras)

    def _publish(self, key: EngineKey) -> None:
        status = self.status(key)
        if status is not None and self._identified:
            self.model.upsert(self._row(key, status, self._host(key[0])))

    def _rows_of(self, node: NodeId) -> list[EngineRow]:
        if node == self.node_id:
            statuses = sorted(self.engines.statuses.values(), key=engine_order)
        elif (member := self.engines.members.get(node)) is not None:
            statuses = sorted(member.engines, key=engine_order)
        else:
            found = self.discovery.node(node)
            return remote_rows(found) if found is not None and not is_self(found) else []
        host = self._host(node)
        return [self._row((node, status.engine), status, host) for status in statuses]

    def _show_node(self, node: NodeId) -> None:
        if self._identified:
            self.model.sync_node(node, self._rows_of(node))

    def _show_all(self) -> None:
        """Make every node's rows current: this node, the members, then other computers."""
        if not self._identified:
            return
        nodes = [self.node_id, *self.engines.members, *self.discovery.nodes]
        wanted = dict.fromkeys(nodes)
        for gone in {row.node_id for row in self.model.rows()} - set(wanted):
            self.model.sync_node(gone, [])
        for node in wanted:
            self._show_node(node)
        self._check_members()

    def _on_discovery_reset(self) -> None:
        self._show_all()

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        # A member's front doors and address come from discovery too.
        if node_id != self.node_id:
            self._show_node(node_id)

    def _on_discovery_node_removed(self, node_id: NodeId) -> None:
        self._on_discovery_node_changed(node_id)

    async def _read_logs(self, key: EngineKey) -> None:
        query = EngineLogsQuery(engine=key[1], lines=LOG_LINES, node=self._wire_node(key[0]))
        try:
            logs = await self.connection.call(methods.ENGINE_LOGS, query)
        except RpcError as exc:
            self.logs_failed.emit(key, exc.message)
            return
        self.logs_loaded.emit(key, logs.lines)
