"""Keeps the Models page's models equal to the broker's and runs load, eject, delete and pull.

This node's models and pulls come from the engines store (its model lists, engine states and
pull progress); other nodes' from the discovery store (read-only until pairing). Every
command marks its row pending in the shared store at once; the mark goes when a model list
shows the result, when the broker answers, on an error (with a message), on its timeout, or
when the broker goes away.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.base import Controller
from app.models.models import (
    DELETING,
    EJECTING,
    LOADING,
    PULLING,
    ModelAction,
    ModelsModel,
    PullRow,
    PullsModel,
    engine_order,
    engine_title,
    expectation_met,
    local_rows,
    remote_rows,
    supports,
)
from app.pending import (
    COLD_LOAD_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    LMSTUDIO_DELETE_TIMEOUT_S,
    PendingActions,
    PendingKey,
)
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore, PullKey
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    DiscoveredNode,
    EngineActionParams,
    EngineName,
    NodeId,
    PullProgress,
)

log = logging.getLogger(__name__)

# How long to wait for the broker's answer: longer than its own deadline for the action (the
# manifests allow 12 min for a cold load and a day for a download), so its error wins.
_RPC_TIMEOUTS_S: dict[ModelAction, float] = {
    "load_model": 900.0,
    "unload_model": 120.0,
    "delete_model": 300.0,
    "pull_model": 86_460.0,
}
_VERBS: dict[ModelAction, str] = {
    "load_model": "load",
    "unload_model": "eject",
    "delete_model": "delete",
    "pull_model": "pull",
}


@dataclass(frozen=True, slots=True)
class PendingTimeouts:
    """Safety-net timeouts for pending marks (seconds)."""

    load: float = COLD_LOAD_TIMEOUT_S
    lmstudio_delete: float = LMSTUDIO_DELETE_TIMEOUT_S
    default: float = DEFAULT_TIMEOUT_S


def pull_row(progress: PullProgress) -> PullRow:
    """The row of a pull that is still running."""
    return PullRow(
        progress.engine,
        progress.model,
        stage=progress.stage,
        percent=progress.percent,
        completed=progress.completed,
        total=progress.total,
    )


class ModelsController(Controller):
    """Owns the models and pulls tables and the tasks that read ``status`` and run commands."""

    engines_changed = Signal()  # this node's running engines (what can pull) changed
    # A load, eject or delete failed or went unconfirmed (also sent as ``command_failed``);
    # a failed pull is not repeated here: its row in ``pulls`` keeps the reason.
    action_failed = Signal(str)

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
        self._begun: dict[PendingKey, str] = {}  # marks this controller set, with their verb
        self._pulling: set[PullKey] = set()  # pulls whose ``engine:action`` is in flight
        pending.expired.connect(self._on_pending_expired)
        engines.reset.connect(self._on_engines_reset)
        engines.engine_changed.connect(self._on_engines_engine_changed)
        engines.models_changed.connect(self._on_engines_models_changed)
        engines.pull_progressed.connect(self._on_engines_pull_progressed)
        discovery.reset.connect(self._on_discovery_reset)
        discovery.node_changed.connect(self._on_discovery_node_changed)
        discovery.node_removed.connect(self._on_discovery_node_removed)

    @property
    def connected(self) -> bool:
        """Commands can run: the broker is ready and this node's id is known."""
        return self.connection.state is ServiceState.READY and self.node_id is not None

    def pull_engines(self) -> list[EngineName]:
        """This node's running engines that can pull models, in a stable order."""
        statuses = self.engines.statuses
        running = {name for name, status in statuses.items() if status.state == "running"}
        usable = (name for name in running | self._listed() if supports(name, "pull_model"))
        return sorted(usable, key=engine_order)

    def is_installed(self, engine: EngineName, model: str) -> bool:
        """Whether this node's ``engine`` lists ``model``."""
        return self.node_id is not None and (
            self.models.find(PendingKey(self.node_id, engine, model)) is not None
        )

    def is_pulling(self, engine: EngineName, model: str) -> bool:
        """Whether a pull of ``model`` is starting or running on this node's ``engine``."""
        key = PendingKey(self.node_id or NodeId(""), engine, model)
        return self.pulls.active(engine, model) or self.pending.action(key) == PULLING

    def load(self, key: PendingKey) -> None:
        """Load a model of this node into memory (a cold load may take minutes)."""
        self._act(key, "load_model", LOADING, self._timeouts.load)

    def eject(self, key: PendingKey) -> None:
        """Unload a model from memory; it stays on disk."""
        self._act(key, "unload_model", EJECTING, self._timeouts.default)

    def delete(self, key: PendingKey) -> None:
        """Delete a model from disk (LM Studio restarts to forget it, hence the longer wait)."""
        timeout = (
            self._timeouts.lmstudio_delete if key.engine == "lmstudio" else self._timeouts.default
        )
        self._act(key, "delete_model", DELETING, timeout)

    def pull(self, engine: EngineName, model: str) -> None:
        """Download ``model`` with this node's ``engine``; progress goes to ``pulls``."""
        model = model.strip()
        if not model or self.node_id is None or not self.connected:
            return
        key = PendingKey(self.node_id, engine, model)
        if self.pulls.active(engine, model) or self.pending.get(key) is not None:
            return
        self._begin(key, PULLING, self._timeouts.default)
        self._pulling.add((engine, model))
        self.pulls.upsert(PullRow(engine, model, stage="Waiting for the engine"))
        self._tasks.spawn(self._run(key, "pull_model"), name=f"pull {engine} {model}")

    def dismiss_pull(self, engine: EngineName, model: str) -> None:
        """Forget a failed pull's row."""
        pull = self.pulls.get((engine, model))
        if pull is not None and pull.failed:
            self.pulls.remove(pull.key)

    def _act(self, key: PendingKey, action: ModelAction, verb: str, timeout: float) -> None:
        if not self.connected or key.node != self.node_id or self.pending.get(key) is not None:
            return
        self._begin(key, verb, timeout)
        self._tasks.spawn(self._run(key, action), name=f"{action} {key.engine} {key.model}")

    def _begin(self, key: PendingKey, verb: str, timeout: float) -> None:
        self._begun[key] = verb
        self.pending.begin(key, verb, timeout)

    def _settle(self, key: PendingKey) -> None:
        self._begun.pop(key, None)
        self.pending.settle(key)

    async def _run(self, key: PendingKey, action: ModelAction) -> None:
        params = EngineActionParams(engine=key.engine, action=action, model=key.model)
        try:
            await self.connection.call(methods.ENGINE_ACTION, params, _RPC_TIMEOUTS_S[action])
        except RpcError as exc:
            log.warning("%s of %s on %s failed: %s", action, key.model, key.engine, exc)
            self._settle(key)
            if action == "pull_model":
                self._end_pull(key.engine, key.model, str(exc))
            else:
                what = f"{_VERBS[action]} {key.model} ({engine_title(key.engine)})"
                self._report(f"Could not {what}: {exc}")
            return
        finally:
            self._pulling.discard((key.engine, key.model))
        # The broker sent its fresh model list before answering; a model it lists under
        # another name (``x`` as ``x:latest``) must not keep the mark until the timeout.
        self._settle(key)
        if action == "pull_model":
            self._end_pull(key.engine, key.model, None)

    def _on_pending_expired(self, key: PendingKey) -> None:
        verb = self._begun.pop(key, None)
        if verb is None or verb == PULLING:
            return  # a quiet pull keeps its progress row until the broker answers
        self._report(
            f"{verb} {key.model} ({engine_title(key.engine)}) was not confirmed in time; "
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
        self.engines_changed.emit()

    async def _read_node(self) -> None:
        try:
            status = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        self.node_id, self.node_name = status.node_id, status.node_name
        self._show_local()
        self._on_discovery_reset()  # the node id tells this node's entry apart
        self.engines_changed.emit()

    def _listed(self) -> set[EngineName]:
        """Engines with a model list, less those known to be stopped (they serve nothing; their
        list comes back when they run again)."""
        models, statuses = self.engines.models, self.engines.statuses
        listed = set(models.by_engine) if models is not None else set()
        return {
            name for name in listed if name not in statuses or statuses[name].state == "running"
        }

    def _show_local(self) -> None:
        models = self.engines.models
        if self.node_id is None or models is None:
            return
        rows = local_rows(self.node_id, self.node_name, models, self._listed())
        self.models.sync_node(self.node_id, rows)
        self._settle_confirmed()

    def _settle_confirmed(self) -> None:
        """Drop the marks whose result the model list now shows."""
        for key, verb in list(self._begun.items()):
            if self.pending.get(key) is None:
                del self._begun[key]
            elif key.node == self.node_id and expectation_met(verb, self.models.find(key)):
                self._settle(key)

    def _on_engines_reset(self) -> None:
        self._show_local()
        snapshot = self.engines.pulls
        for pull in self.pulls.rows():  # a pull that ended while the stream was not followed
            gone = pull.key not in snapshot and pull.key not in self._pulling
            if gone and not pull.failed:
                self.pulls.remove(pull.key)
        for progress in snapshot.values():
            self.pulls.upsert(pull_row(progress))
        self.engines_changed.emit()

    def _on_engines_engine_changed(self, _engine: EngineName) -> None:
        self._show_local()
        self.engines_changed.emit()

    def _on_engines_models_changed(self) -> None:
        self._show_local()
        self.engines_changed.emit()

    def _on_engines_pull_progressed(self, progress: PullProgress) -> None:
        key = PendingKey(self.node_id or NodeId(""), progress.engine, progress.model)
        if progress.done:
            self._settle(key)
            self._end_pull(progress.engine, progress.model, progress.error)
            return
        # "Pulling…" lasts until the terminal event; its timeout means "no sign of life".
        self.pending.extend(key)
        self.pulls.upsert(pull_row(progress))

    def _end_pull(self, engine: EngineName, model: str, error: str | None) -> None:
        """The one end of a pull: success drops its row, failure keeps it with the reason."""
        pull = self.pulls.get((engine, model))
        if pull is None or pull.failed:
            return  # already ended (the terminal event comes before the broker's answer)
        if error is None:
            self.pulls.remove(pull.key)
            return
        self.pulls.upsert(replace(pull, error=error, percent=None))
        self.command_failed.emit(f"Could not pull {model} ({engine_title(engine)}): {error}")

    # -- other nodes ---------------------------------------------------------------------------

    def _on_discovery_reset(self) -> None:
        nodes = self.discovery.nodes.values()
        remote = {node.node_id: node for node in nodes if not self._is_self(node)}
        for node_id in self.models.nodes() - set(remote) - {self.node_id}:
            self.models.remove_where(node_id)
        for node in remote.values():
            self.models.sync_node(node.node_id, remote_rows(node))

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None and not self._is_self(node):
            self.models.sync_node(node_id, remote_rows(node))

    def _on_discovery_node_removed(self, node_id: NodeId) -> None:
        if node_id != self.node_id:  # this node's models come from the engines themselves
            self.models.remove_where(node_id)

    def _is_self(self, node: DiscoveredNode) -> bool:
        return node.node_id == self.node_id or is_self(node)
