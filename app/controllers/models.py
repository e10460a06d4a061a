"""Keeps the Models page's models equal to the broker's and runs load, eject, delete and pull on
this node or on any other member.

This node's models and pulls come from the engines store (its model lists, engine states and
pull progress), another member's from its state in the same store (``members``: its models,
engines and pulls, sent with its ``node``); computers outside the cluster from the discovery
store (read-only). Every command marks its row pending in the shared store at once; the mark
goes when a model list shows the result, when the broker answers, on an error (with a
message), on its timeout, when a member cannot be reached or leaves, or when the broker goes
away.
"""

from __future__ import annotations

import logging

import msgspec
from msgspec.structs import replace
from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.catalog import url_model_name
from app.controllers.base import Controller
from app.models.models import (
    DELETING,
    EJECTING,
    LOADING,
    PULLING,
    ModelAction,
    ModelsModel,
    engine_order,
    engine_title,
    expectation_met,
    listed_engines,
    local_rows,
    member_rows,
    remote_rows,
    restarts_after_delete,
    supports,
    with_spread,
)
from app.models.pulls import PullRow, PullsModel
from app.pending import (
    BACKEND,
    COLD_LOAD_TIMEOUT_S,
    LMSTUDIO_DELETE_TIMEOUT_S,
    MODEL_ACTION_TIMEOUT_S,
    PendingActions,
    PendingKey,
    call_timeout,
)
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineActionParams, MemberEngines, PullProgress
from backend.protocol.types.nodes import DiscoveredNode

log = logging.getLogger(__name__)

# How long to wait for the broker's answer: longer than its own deadline for the action, so
# its error wins (a download is bounded by a day).
PULL_DEADLINE_S = 86_400.0
RPC_TIMEOUTS_S: dict[ModelAction, float] = {
    "load_model": call_timeout(BACKEND.model_load),
    "unload_model": call_timeout(BACKEND.model_unload),
    "delete_model": call_timeout(max(BACKEND.model_delete, BACKEND.delete_and_restart)),
    "pull_model": call_timeout(PULL_DEADLINE_S),
}
_VERBS: dict[ModelAction, str] = {
    "load_model": "load",
    "unload_model": "eject",
    "delete_model": "delete",
    "pull_model": "pull",
}


class PendingTimeouts(msgspec.Struct, frozen=True):
    """Safety-net timeouts for pending marks (seconds)."""

    load: float = COLD_LOAD_TIMEOUT_S
    lmstudio_delete: float = LMSTUDIO_DELETE_TIMEOUT_S
    default: float = MODEL_ACTION_TIMEOUT_S  # unload, another delete, a pull's silence


def pull_row(node: NodeId, name: str, local: bool, progress: PullProgress) -> PullRow:
    """The row of a pull that is still running on ``node`` (called ``name``)."""
    return PullRow(
        node,
        progress.engine,
        progress.model,
        stage=progress.stage,
        percent=progress.percent,
        completed=progress.completed,
        total=progress.total,
        node_name=name,
        local=local,
    )


class ModelsController(Controller):
    """Owns the models and pulls tables, the computer pulls go to, and the tasks that read
    ``status`` and run commands."""

    engines_changed = Signal()  # the running engines (what can pull) of some member changed
    pull_node_changed = Signal()  # pulls now go to another computer
    # A load, eject or delete failed or went unconfirmed (also sent as ``command_failed``);
    # a failed pull is not repeated here: its row in ``pulls`` keeps the reason.
    action_failed = Signal(str)
    pull_finished = Signal(object)  # the PendingKey of a pull that ended well

    def __init__(
        self,
        connection: BrokerConnection,
        pending: PendingActions,
        engines: EnginesStore,
        discovery: DiscoveryStore,
        timeouts: PendingTimeouts | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.pending = pending
        self.engines = engines
        self.discovery = discovery
        self.models = ModelsModel(pending, self)
        self.pulls = PullsModel(self)
        self._timeouts = timeouts or PendingTimeouts()
        self.node_id: NodeId | None = None
        self.node_name = ""
        self.pull_node: NodeId | None = None  # where the Pull bar and the hub pull (None: here)
        self._begun: dict[PendingKey, str] = {}  # marks this controller set, with their verb
        self._pulling: set[PendingKey] = set()  # pulls whose ``engine:action`` is in flight
        pending.expired.connect(self._on_pending_expired)
        engines.reset.connect(self._on_engines_reset)
        engines.engine_changed.connect(self._on_engines_engine_changed)
        engines.models_changed.connect(self._on_engines_models_changed)
        engines.pull_progressed.connect(self._on_engines_pull_progressed)
        engines.member_changed.connect(self._on_engines_member_changed)
        discovery.reset.connect(self._on_discovery_reset)
        discovery.node_changed.connect(self._on_discovery_node_changed)
        discovery.node_removed.connect(self._on_discovery_node_removed)

    @property
    def connected(self) -> bool:
        """Commands can run: the broker is ready and this node's id is known."""
        return self.connection.state is ServiceState.READY and self.node_id is not None

    def reachable(self, node: NodeId | None) -> bool:
        """Whether commands can reach ``node`` (None or this node, or a member that is up)."""
        if node is None or node == self.node_id:
            return self.connected
        member = self._member(node)
        return self.connected and member is not None and member.reachable

    def pull_nodes(self) -> list[tuple[NodeId | None, str]]:
        """The computers a pull can go to: this one (None), then the members that are up."""
        members = [m for m in self.engines.members.values() if m.reachable]
        members.sort(key=lambda member: member.name.casefold())
        return [(None, "This computer"), *((m.node_id, m.name) for m in members)]

    def set_pull_node(self, node: NodeId | None) -> None:
        """Pull on ``node`` from now on (None: this computer)."""
        node = None if node == self.node_id else node
        if node != self.pull_node:
            self.pull_node = node
            self.pull_node_changed.emit()

    def node_name_of(self, node: NodeId | None) -> str:
        """``node`` in a sentence: "this computer" or its name."""
        member = None if node is None else self._member(node)
        return "this computer" if member is None else member.name

    def pull_engines(self, node: NodeId | None = None) -> list[EngineName]:
        """The running engines of ``node`` (None: this node) that can pull, in a stable order."""
        member = None if node is None else self._member(node)
        if member is not None:
            statuses, listed = member.engines, self._listed(member)
        else:
            statuses, listed = list(self.engines.statuses.values()), self._listed(None)
        running = {status.engine for status in statuses if status.state == "running"}
        usable = (name for name in running | listed if supports(name, "pull_model"))
        return sorted(usable, key=engine_order)

    def engine_installed(self, engine: EngineName, node: NodeId | None = None) -> bool | None:
        """Whether ``engine`` is installed on ``node`` (None: this node); None when unknown."""
        member = None if node is None else self._member(node)
        statuses = member.engines if member is not None else self.engines.statuses.values()
        found = [status.installed for status in statuses if status.engine == engine]
        return found[0] if found else None

    def is_installed(self, engine: EngineName, model: str, node: NodeId | None = None) -> bool:
        """Whether ``engine`` of ``node`` (None: this node) lists ``model``."""
        key = self._key(engine, model, node)
        return key is not None and self.models.find(key) is not None

    def is_pulling(self, engine: EngineName, model: str, node: NodeId | None = None) -> bool:
        """Whether a pull of ``model`` is starting or running on ``engine`` of ``node``."""
        key = self._key(engine, model, node) or PendingKey(NodeId(""), engine, model)
        return self.pulls.active(key) or self.pending.action(key) == PULLING

    def load(self, key: PendingKey) -> None:
        """Load a model into memory (a cold load may take minutes)."""
        self._act(key, "load_model", LOADING, self._timeouts.load)

    def eject(self, key: PendingKey) -> None:
        """Unload a model from memory; it stays on disk."""
        self._act(key, "unload_model", EJECTING, self._timeouts.default)

    def delete(self, key: PendingKey) -> None:
        """Delete a model from disk (an engine that restarts to forget it, as LM Studio does,
        takes longer)."""
        restarts = restarts_after_delete(key.engine)
        timeout = self._timeouts.lmstudio_delete if restarts else self._timeouts.default
        self._act(key, "delete_model", DELETING, timeout)

    def pull(self, engine: EngineName, model: str, node: NodeId | None = None) -> None:
        """Download ``model`` with ``engine`` of ``node`` (None: this node); progress goes to
        ``pulls``."""
        model, url = model.strip(), None
        if model.startswith(("http://", "https://")):
            # A model file's address (llama.cpp): saved, listed and tracked under its file's name.
            url, model = model, url_model_name(model)
        key = self._key(engine, model, node)
        if not model or key is None or not self.reachable(key.node):
            return
        if self.pulls.active(key) or self.pending.get(key) is not None:
            return
        self._begin(key, PULLING, self._timeouts.default)
        self._pulling.add(key)
        name, local = self._name(key.node), key.node == self.node_id
        waiting = PullRow(key.node, engine, model, "Waiting for the engine", node_name=name)
        self.pulls.upsert(replace(waiting, local=local))
        self._tasks.spawn(
            self._run(key, "pull_model", url=url), name=f"pull {engine} {model} {key.node}"
        )

    def dismiss_pull(self, key: PendingKey) -> None:
        """Forget a failed pull's row."""
        pull = self.pulls.get(key)
        if pull is not None and pull.failed:
            self.pulls.remove(pull.key)

    def _key(self, engine: EngineName, model: str, node: NodeId | None) -> PendingKey | None:
        where = node or self.node_id
        return None if where is None else PendingKey(where, engine, model)

    def _member(self, node: NodeId) -> MemberEngines | None:
        return None if node == self.node_id else self.engines.members.get(node)

    def _name(self, node: NodeId) -> str:
        member = self._member(node)
        return member.name if member is not None else self.node_name

    def _act(self, key: PendingKey, action: ModelAction, verb: str, timeout: float) -> None:
        if not self.reachable(key.node) or self.pending.get(key) is not None:
            return
        if key.node != self.node_id and self._member(key.node) is None:
            return  # a computer outside the cluster: its models are only shown
        self._begin(key, verb, timeout)
        self._tasks.spawn(self._run(key, action), name=f"{action} {key.engine} {key.model}")

    def _begin(self, key: PendingKey, verb: str, timeout: float) -> None:
        self._begun[key] = verb
        self.pending.begin(key, verb, timeout)

    def _settle(self, key: PendingKey) -> None:
        self._begun.pop(key, None)
        self.pending.settle(key)

    def _what(self, key: PendingKey) -> str:
        """The model in a message: ``qwen3:8b (Ollama)``, ``… on laptop`` for a member's."""
        where = "" if key.node == self.node_id else f" on {self._name(key.node)}"
        return f"{key.model} ({engine_title(key.engine)}){where}"

    async def _run(self, key: PendingKey, action: ModelAction, *, url: str | None = None) -> None:
        node = None if key.node == self.node_id else key.node
        params = EngineActionParams(
            engine=key.engine, action=action, model=key.model, node=node, url=url
        )
        try:
            await self.connection.call(methods.ENGINE_ACTION, params, RPC_TIMEOUTS_S[action])
        except RpcError as exc:
            log.warning("%s of %s on %s failed: %s", action, key.model, key.engine, exc)
            self._settle(key)
            if action == "pull_model":
                self._end_pull(key, str(exc))
            else:
                self._report(f"Could not {_VERBS[action]} {self._what(key)}: {exc}")
            return
        finally:
            self._pulling.discard(key)
        # The broker sent its fresh model list before answering; a model it lists under
        # another name (``x`` as ``x:latest``) must not keep the mark until the timeout.
        self._settle(key)
        if action == "pull_model":
            self._end_pull(key, None)

    def _on_pending_expired(self, key: PendingKey) -> None:
        verb = self._begun.pop(key, None)
        if verb is None or verb == PULLING:
            return  # a quiet pull keeps its progress row until the broker answers
        self._report(
            f"{verb} {self._what(key)} was not confirmed in time; "
            "the list shows what the engine reports."
        )

    def _report(self, message: str) -> None:
        self.action_failed.emit(message)
        self.command_failed.emit(message)

    # -- this node -----------------------------------------------------------------------------

    def _on_connection_session_ready(self) -> None:
        self._tasks.spawn(self._read_node(), name="status")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is not None:
            return
        self.node_id = None
        self._begun.clear()
        self._pulling.clear()
        self.pending.clear_all()
        self.models.reset([])
        self.pulls.reset([])
        self.set_pull_node(None)
        self.engines_changed.emit()

    async def _read_node(self) -> None:
        try:
            status = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        self.node_id, self.node_name = status.node_id, status.node_name
        self._on_engines_reset()
        self._on_discovery_reset()  # the node id tells this node's entry apart

    def _listed(self, member: MemberEngines | None) -> set[EngineName]:
        if member is not None:
            return listed_engines(member.models, member.engines)
        return listed_engines(self.engines.models, self.engines.statuses.values())

    def _show_local(self) -> None:
        models = self.engines.models
        if self.node_id is None or models is None:
            return
        rows = local_rows(self.node_id, self.node_name, models, self._listed(None))
        rows = with_spread(rows, self.engines.statuses.values())
        self.models.sync_node(self.node_id, rows)
        self._settle_confirmed(self.node_id)

    def _settle_confirmed(self, node: NodeId) -> None:
        """Drop the marks on ``node`` whose result the model list now shows."""
        for key, verb in list(self._begun.items()):
            if self.pending.get(key) is None:
                del self._begun[key]
            elif key.node == node and expectation_met(verb, self.models.find(key)):
                self._settle(key)

    def _on_engines_reset(self) -> None:
        if self.node_id is not None:  # this node's id tells its rows and pulls apart
            self._show_local()
            here = self.node_id
            local = {PendingKey(here, e, m): p for (e, m), p in self.engines.pulls.items()}
            self._drop_unreported(here, local)
            for progress in local.values():
                self.pulls.upsert(pull_row(here, self.node_name, True, progress))
        members = self.engines.members
        former = {row.key.node for row in self.models.rows() if row.member} - set(members)
        former |= {pull.node for pull in self.pulls.rows() if not pull.local} - set(members)
        for node in former:
            self._forget_member(node)
            self._on_discovery_node_changed(node)  # it may still be seen on the network
        for member in members.values():
            self._show_member(member)
        self.engines_changed.emit()

    def _drop_unreported(self, node: NodeId, reported: dict[PendingKey, PullProgress]) -> None:
        """Drop ``node``'s pulls that ended while no progress was followed (not this app's own
        pulls still waiting for their answer, nor failed ones kept for their reason)."""
        for pull in self.pulls.rows():
            gone = pull.key not in reported and pull.key not in self._pulling
            if pull.node == node and gone and not pull.failed:
                self.pulls.remove(pull.key)

    def _on_engines_engine_changed(self, _engine: EngineName) -> None:
        self._show_local()
        self.engines_changed.emit()

    def _on_engines_models_changed(self) -> None:
        self._show_local()
        self.engines_changed.emit()

    def _on_engines_pull_progressed(self, progress: PullProgress) -> None:
        if self.node_id is not None:
            key = PendingKey(self.node_id, progress.engine, progress.model)
            self._pull_step(key, progress)

    def _pull_step(self, key: PendingKey, progress: PullProgress) -> None:
        if progress.done:
            self._settle(key)
            self._end_pull(key, progress.error)
            return
        # "Pulling…" lasts until the terminal step; its timeout means "no sign of life".
        self.pending.extend(key)
        local = key.node == self.node_id
        self.pulls.upsert(pull_row(key.node, self._name(key.node), local, progress))

    def _end_pull(self, key: PendingKey, error: str | None) -> None:
        """The one end of a pull: success drops its row, failure keeps it with the reason."""
        pull = self.pulls.get(key)
        if pull is None or pull.failed:
            return  # already ended (the terminal event comes before the broker's answer)
        if error is None:
            self.pulls.remove(pull.key)
            self.pull_finished.emit(pull.key)
            return
        self.pulls.upsert(replace(pull, error=error, percent=None))
        self.command_failed.emit(f"Could not pull {self._what(key)}: {error}")

    # -- other members -------------------------------------------------------------------------

    def _on_engines_member_changed(self, node_id: NodeId) -> None:
        if node_id == self.node_id:
            return
        member = self.engines.members.get(node_id)
        if member is None:
            self._forget_member(node_id)
            self._on_discovery_node_changed(node_id)  # it may still be seen on the network
        else:
            self._show_member(member)
        if self.pull_node is not None and not self.reachable(self.pull_node):
            self.set_pull_node(None)
        self.engines_changed.emit()

    def _show_member(self, member: MemberEngines) -> None:
        """A member's whole state: its rows and pulls; away, nothing of it can be confirmed."""
        node = member.node_id
        if not member.reachable:
            self.pending.settle_node(node)
        self.models.sync_node(node, with_spread(member_rows(member), member.engines))
        self._settle_confirmed(node)
        reported = {PendingKey(node, pull.engine, pull.model): pull for pull in member.pulls}
        if member.reachable:  # away, its pulls stay as last seen until their calls answer
            self._drop_unreported(node, reported)
        for key, progress in reported.items():
            known = self.pulls.get(key)
            if progress.done and known is None:
                continue  # a pull this app never saw ended: nothing to show or settle
            if progress.done or known != pull_row(node, member.name, False, progress):
                self._pull_step(key, progress)

    def _forget_member(self, node: NodeId) -> None:
        self.pending.settle_node(node)
        self.models.remove_where(node)
        for pull in self.pulls.rows():
            if pull.node == node and pull.key not in self._pulling:
                self.pulls.remove(pull.key)

    # -- computers outside the cluster ---------------------------------------------------------

    def _on_discovery_reset(self) -> None:
        outside = {
            node.node_id: node for node in self.discovery.nodes.values() if self._shown(node)
        }
        members = set(self.engines.members)
        for node_id in self.models.nodes() - set(outside) - members - {self.node_id}:
            self.models.remove_where(node_id)
        for node in outside.values():
            self.models.sync_node(node.node_id, remote_rows(node))

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None and self._shown(node):
            self.models.sync_node(node_id, remote_rows(node))

    def _on_discovery_node_removed(self, node_id: NodeId) -> None:
        if node_id != self.node_id and node_id not in self.engines.members:
            self.models.remove_where(node_id)

    def _shown(self, node: DiscoveredNode) -> bool:
        """Whether discovery's view of ``node`` is shown: a computer outside the cluster (this
        node's and the members' models come from their engines)."""
        own = node.node_id == self.node_id or is_self(node)
        return not own and node.node_id not in self.engines.members
