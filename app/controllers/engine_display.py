"""What the Engines page shows, kept in ``EnginesModel``: fed by the engines store, the discovery
store and the shared ``PendingActions`` through their signals, the way qutebrowser feeds its
completion models. It makes no calls: reads it wants (an engine's versions, this node's doors)
go to the callbacks it is given, and commands report their outcome to ``command_done`` and
``command_failed``.

A click shows its verb at once through ``PendingActions``, keyed by node and engine. It clears
on the backend's truth: a state change that is the command's outcome (or an error state), for
another member its state in a ``member_changed`` event; a terminal install or update progress
step; or the command's own answer (success or RPC error, whose message is shown on the card).
Otherwise the store's timeout ends it ("did not confirm in time"); a member that cannot be
reached or leaves ends its own; a lost session ends everything."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.controllers.engine_ops import WITH_PROGRESS
from app.controllers.engine_rows import RowSources, rows_of
from app.models.engines import (
    VERBS,
    EngineCommand,
    EngineKey,
    EnginesModel,
    Expectation,
    confirms,
    door_ports,
    timed_out,
)
from app.pending import PendingActions, PendingKey
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.engines import (
    EngineState,
    EngineStatus,
    EngineVersions,
    InstallProgress,
    MemberEngines,
)

MemberView = tuple[str, bool, str | None, bool]  # name, reachable, error, has engines


class EngineDisplay(QObject):
    """The Engines page's state: every node's rows, the notices and port errors shown on cards,
    the commands waiting for their outcome, and why this node's engines cannot be shown.
    ``ask_versions(key)`` starts a read of an engine's versions (False: none could start);
    ``ask_doors()`` reads this node's doors again. Owns no tasks."""

    problem_changed = Signal()
    nodes_changed = Signal()  # a member joined, left, was renamed or went (un)reachable

    def __init__(
        self,
        model: EnginesModel,
        pending: PendingActions,
        engines: EnginesStore,
        discovery: DiscoveryStore,
        *,
        ask_versions: Callable[[EngineKey], bool],
        ask_doors: Callable[[], None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.model = model
        self.pending = pending
        self.engines = engines
        self.discovery = discovery
        self._ask_versions = ask_versions
        self._ask_doors = ask_doors
        self.sources = RowSources(engines, discovery, pending)
        self.problem: str | None = None  # why this node's engines cannot be shown
        self.identified = False  # ``status`` was read in this session (rows wait for it)
        self._states: dict[EngineKey, EngineState] = {}  # as last seen, to spot a move on
        self._expectations: dict[EngineKey, Expectation] = {}
        self._asked: set[EngineKey] = set()  # versions read (or being read) in this session
        self._members_shown: dict[NodeId, MemberView] = {}
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

    @property
    def node_id(self) -> NodeId:
        """This node's id ("" until ``status`` named it)."""
        return self.sources.node_id

    # -- reading -------------------------------------------------------------------------------

    def status(self, key: EngineKey) -> EngineStatus | None:
        """The last known status of an engine of this node or of a member."""
        return self.sources.status(key)

    def reachable(self, node: NodeId) -> bool:
        """Whether commands can reach ``node`` (this node, or a member whose link is up)."""
        member = self.engines.members.get(node)
        return node == self.node_id or (member is not None and member.reachable)

    def members(self) -> list[MemberEngines]:
        """The other members, by name (once this node is known)."""
        if not self.identified:
            return []
        others = (m for m in self.engines.members.values() if m.node_id != self.node_id)
        return sorted(others, key=lambda member: (member.name.casefold(), member.node_id))

    # -- the session ---------------------------------------------------------------------------

    def identify(self, broker: BrokerStatus | None) -> None:
        """``status`` was read (None: it failed, what was known stays): show every node's
        rows."""
        if broker is not None:
            self.sources.node_id, self.sources.node_name = broker.node_id, broker.node_name
            self.sources.doors = door_ports(broker.front_doors)
        self.identified = True
        self._note_everything()
        self._show_all()

    def show_doors(self, doors: dict[str, int]) -> None:
        """This node's doors as ``status`` read them again; its rows change if they moved."""
        if doors != self.sources.doors:
            self.sources.doors = doors
            self._show_node(self.node_id)

    def end_session(self) -> None:
        """The session ended: forget everything, end every pending mark, empty the model."""
        self.sources.forget()
        self.identified = False
        self._states, self._expectations, self._asked = {}, {}, set()
        self._members_shown = {}
        self.problem = None
        self.pending.clear_all()
        self.model.reset([])
        self.problem_changed.emit()
        self.nodes_changed.emit()

    # -- commands ------------------------------------------------------------------------------

    def begin(
        self, key: EngineKey, command: EngineCommand, port: int | None, timeout: float
    ) -> Expectation | None:
        """Show ``command`` pending on the engine at once; None (nothing shown) when the
        engine is unknown, busy or cannot be reached."""
        status = self.status(key)
        pending_key = PendingKey(*key)
        busy = self.pending.get(pending_key) is not None
        if status is None or busy or not self.reachable(key[0]):
            return None
        self.sources.notices.pop(key, None)
        expect = Expectation(command, status.revision, port)
        self._expectations[key] = expect
        self.pending.begin(pending_key, VERBS[command], timeout)  # shown at once
        return expect

    def command_failed(self, key: EngineKey, expect: Expectation, message: str) -> None:
        """The broker refused the command: say why on its card."""
        if self._expectations.get(key) is not expect:
            return
        if expect.command is EngineCommand.SET_PORT:
            self.sources.port_errors[key] = message
        else:
            self.sources.notices[key] = f"Could not {expect.command}: {message}"
        self.command_done(key, expect, keep_notice=True)

    def command_done(
        self, key: EngineKey, expect: Expectation, *, keep_notice: bool = False
    ) -> None:
        """The command's outcome is known: drop its pending state and its expectation."""
        if self._expectations.get(key) is not expect:
            return  # the session ended or a newer command replaced this one
        del self._expectations[key]
        if expect.expired and not keep_notice:
            self.sources.notices.pop(key, None)
        if expect.command in WITH_PROGRESS:  # a new version is installed: read it again
            self._asked.discard(key)
            self._want_versions(key)
        if not self.pending.settle(PendingKey(*key)):
            self.publish(key)

    def show_port_error(self, key: EngineKey, error: str | None) -> None:
        """Show (or, with None, drop) the reason a typed port was refused."""
        if error is None:
            self.sources.port_errors.pop(key, None)
        else:
            self.sources.port_errors[key] = error

    def drop_port_error(self, key: EngineKey) -> None:
        """The user edited the port: the refusal of the port typed before no longer applies."""
        if self.sources.port_errors.pop(key, None) is not None:
            self.publish(key)

    def show_versions(self, key: EngineKey, versions: EngineVersions) -> None:
        """An engine's versions were read."""
        if versions != self.sources.versions.get(key):
            self.sources.versions[key] = versions
            self.publish(key)

    # -- this node -----------------------------------------------------------------------------

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
        if not self.identified:
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
        if status is None or not self.identified:
            return  # once identified, every status is checked
        key = (self.node_id, engine)
        self._note_status(key, status)
        self.publish(key)
        if status.state == "running" and status.front_door not in self.sources.doors:
            self._ask_doors()

    def _note_status(self, key: EngineKey, status: EngineStatus) -> None:
        """Settle the command ``status`` is the outcome of; drop a notice the engine moved past."""
        previous = self._states.get(key)
        self._states[key] = status.state
        expect = self._expectations.get(key)
        if expect is not None and confirms(expect, status):
            self.command_done(key, expect)
        elif expect is None and previous is not None and previous != status.state:
            self.sources.notices.pop(key, None)  # the engine moved on: the old notice is stale
        if status.installed:
            self._want_versions(key)

    def _on_engines_install_progressed(self, progress: InstallProgress) -> None:
        if not self.identified:
            return
        key = (self.node_id, progress.engine)
        if not self._note_install(key, progress):
            self.publish(key)

    def _note_install(self, key: EngineKey, progress: InstallProgress) -> bool:
        """Apply one install or update step; True when it ended the command (and published)."""
        expect = self._expectations.get(key)
        if not progress.done:
            self.pending.extend(PendingKey(*key))  # still alive: restart the safety timeout
        if progress.error:
            updating = expect is not None and expect.command is EngineCommand.UPDATE
            failed = f"{'Update' if updating else 'Install'} failed: {progress.error}"
            self.sources.notices[key] = failed
        if progress.done and expect is not None and expect.command in WITH_PROGRESS:
            self.command_done(key, expect, keep_notice=progress.error is not None)
            return True
        return False

    def _on_engines_scheduler_changed(self) -> None:
        """New schedulers of this node's engines: repaint the rows whose scheduler changed."""
        if not self.identified:
            return
        for row in self.model.node_rows(self.node_id):
            if row.scheduler != self.engines.scheduler(row.engine):
                self.publish(row.key)

    # -- other members -------------------------------------------------------------------------

    def _on_engines_member_changed(self, node_id: NodeId) -> None:
        if not self.identified or node_id == self.node_id:
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
        """``node`` is no longer a member: drop what is kept about it."""
        self.sources.forget_node(node)
        self._states = {key: state for key, state in self._states.items() if key[0] != node}
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
        wanted = self.identified and key not in self._asked and self.reachable(key[0])
        if wanted and self._ask_versions(key):
            self._asked.add(key)

    # -- rows ----------------------------------------------------------------------------------

    def _on_pending_changed(self, key: PendingKey) -> None:
        if not key.model:
            self.publish((key.node, key.engine))

    def _on_pending_expired(self, key: PendingKey) -> None:
        engine_key = (key.node, key.engine)
        expect = self._expectations.get(engine_key)
        if key.model or expect is None:
            return
        expect.expired = True
        self.sources.notices[engine_key] = timed_out(VERBS[expect.command])
        self.publish(engine_key)

    def publish(self, key: EngineKey) -> None:
        """Show the engine's row as it is now (once this node is known)."""
        status = self.status(key)
        if status is not None and self.identified:
            self.model.upsert(self.sources.row(key, status, self.sources.host(key[0])))

    def _show_node(self, node: NodeId) -> None:
        if self.identified:
            self.model.sync_node(node, rows_of(self.sources, node))

    def _show_all(self) -> None:
        """Make every node's rows current: this node, the members, then other computers."""
        if not self.identified:
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
