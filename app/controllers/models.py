"""Keeps the Models page's models equal to the broker's and runs load, eject, delete and pull.

This node's models come from ``engine:models`` and the ``engine:models-changed`` pushes; other
nodes' from the discovery snapshot and its numbered events (read-only until pairing). Every
command marks its row pending in the shared store at once; the mark goes when a model list
shows the result, when the broker answers, on an error (with a message), on its timeout, or
when the broker goes away.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.base import Controller, decode
from app.controllers.subscription import NumberedSubscription
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
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    BrokerStatus,
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    EngineModels,
    EngineStatus,
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


class ModelsController(Controller):
    """Owns the models and pulls tables and the tasks that read snapshots and run commands."""

    engines_changed = Signal()  # this node's running engines (what can pull) changed
    # A load, eject or delete failed or went unconfirmed (also sent as ``command_failed``);
    # a failed pull is not repeated here: its row in ``pulls`` keeps the reason.
    action_failed = Signal(str)

    def __init__(
        self,
        connection: BrokerConnection,
        pending: PendingActions,
        timeouts: PendingTimeouts | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.pending = pending
        self.models = ModelsModel(pending, self)
        self.pulls = PullsModel(self)
        self._timeouts = timeouts or PendingTimeouts()
        self.node_id: str | None = None
        self.node_name = ""
        self._engines: dict[str, EngineStatus] = {}
        self._listed_engines: set[str] = set()
        self._early_local: EngineModels | None = None  # a push that overtook the node's id
        self._local_pushes = 0  # ``engine:models-changed`` seen, to spot answers a push overtook
        self._begun: dict[PendingKey, str] = {}  # marks this controller set, with their verb
        self._discovery = NumberedSubscription(
            self._tasks,
            connection,
            methods.DISCOVERY_SUBSCRIBE,
            DiscoverySnapshot,
            DiscoveryEvent,
            on_snapshot=self._show_nodes,
            on_event=self._apply_discovery_event,
        )
        self._refresh: asyncio.Task[None] | None = None
        pending.expired.connect(self._on_pending_expired)

    @property
    def connected(self) -> bool:
        """Commands can run: the broker is ready and this node's id is known."""
        return self.connection.state is ServiceState.READY and self.node_id is not None

    def pull_engines(self) -> list[str]:
        """This node's running engines that can pull models, in a stable order."""
        running = {name for name, status in self._engines.items() if status.state == "running"}
        usable = (name for name in running | self._listed_engines if supports(name, "pull_model"))
        return sorted(usable, key=engine_order)

    def is_installed(self, engine: str, model: str) -> bool:
        """Whether this node's ``engine`` lists ``model``."""
        return self.node_id is not None and (
            self.models.find(PendingKey(self.node_id, engine, model)) is not None
        )

    def is_pulling(self, engine: str, model: str) -> bool:
        """Whether a pull of ``model`` is starting or running on this node's ``engine``."""
        key = PendingKey(self.node_id or "", engine, model)
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

    def pull(self, engine: str, model: str) -> None:
        """Download ``model`` with this node's ``engine``; progress goes to ``pulls``."""
        model = model.strip()
        if not model or self.node_id is None or not self.connected:
            return
        key = PendingKey(self.node_id, engine, model)
        if self.pulls.active(engine, model) or self.pending.get(key) is not None:
            return
        self._begin(key, PULLING, self._timeouts.default)
        self.pulls.upsert(PullRow(engine, model, stage="Waiting for the engine"))
        self._tasks.spawn(self._run(key, "pull_model"), name=f"pull {engine} {model}")

    def dismiss_pull(self, engine: str, model: str) -> None:
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
        params = {"engine": key.engine, "action": action, "model": key.model}
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
        # The broker pushed its fresh model list before answering; a model it lists under
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

    def _on_connection_session_ready(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
        self._refresh = self._tasks.spawn(self._read_snapshots(), name="snapshots")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is not None:
            return
        self.node_id = None
        self._engines, self._listed_engines = {}, set()
        self._early_local = None
        self._discovery.reset()
        self._begun.clear()
        self.pending.clear_all()
        self.models.reset([])
        self.pulls.reset([])
        self.engines_changed.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.ENGINE_MODELS_CHANGED:
            models = decode(params, EngineModels)
            if models is not None:
                self._local_pushes += 1
                self._apply_local(models)
        elif method == methods.ENGINE_PULL_PROGRESS:
            progress = decode(params, PullProgress)
            if progress is not None:
                self._apply_progress(progress)
        elif method == methods.ENGINE_STATE_CHANGED:
            status = decode(params, EngineStatus)
            if status is not None:
                self._apply_engine(status)
        elif method == methods.DISCOVERY_EVENT:
            self._discovery.feed(params)

    async def _read_snapshots(self) -> None:
        """This node's id, its engines and models, then the other nodes (each may fail alone)."""
        try:
            status = decode(await self.connection.call(methods.STATUS), BrokerStatus)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        if status is None:
            return
        self.node_id, self.node_name = status.node_id, status.node_name
        await self._read_engines()
        early, self._early_local = self._early_local, None
        if early is not None:
            self._apply_local(early)
        await self._read_local_models()
        self._discovery.start()

    async def _read_engines(self) -> None:
        try:
            raw = await self.connection.call(methods.ENGINE_STATUS, {})
        except RpcError as exc:
            log.info("engine:status failed: %s", exc)
            return
        statuses = decode(raw, list[EngineStatus]) or []
        self._engines = {status.engine: status for status in statuses}
        self.engines_changed.emit()

    async def _read_local_models(self) -> None:
        pushes = self._local_pushes
        try:
            raw = await self.connection.call(methods.ENGINE_MODELS)
        except RpcError as exc:
            log.info("engine:models failed (keeping the last list): %s", exc)
            return
        models = decode(raw, EngineModels)
        # A push that came while the answer was on its way is at least as new as the answer.
        if models is not None and pushes == self._local_pushes:
            self._apply_local(models)

    def _apply_local(self, models: EngineModels) -> None:
        if self.node_id is None:
            self._early_local = models
            return
        self.models.sync_node(self.node_id, local_rows(self.node_id, self.node_name, models))
        if set(models.by_engine) != self._listed_engines:
            self._listed_engines = set(models.by_engine)
            self.engines_changed.emit()
        self._settle_confirmed()

    def _settle_confirmed(self) -> None:
        """Drop the marks whose result the model list now shows."""
        for key, verb in list(self._begun.items()):
            if self.pending.get(key) is None:
                del self._begun[key]
            elif key.node == self.node_id and expectation_met(verb, self.models.find(key)):
                self._settle(key)

    def _apply_engine(self, status: EngineStatus) -> None:
        was_running = self._engines.get(status.engine)
        self._engines[status.engine] = status
        if status.state == "running":
            if was_running is None or was_running.state != "running":
                self._tasks.spawn(self._read_local_models(), name="models after start")
        elif self.node_id is not None:
            # A stopped engine serves nothing; its list comes back when it runs again.
            self.models.remove_where(self.node_id, status.engine)
            self._listed_engines.discard(status.engine)
        self.engines_changed.emit()

    def _apply_progress(self, progress: PullProgress) -> None:
        key = PendingKey(self.node_id or "", progress.engine, progress.model)
        if progress.done:
            self._settle(key)
            self._end_pull(progress.engine, progress.model, progress.error)
            return
        # "Pulling…" lasts until the terminal push; its timeout means "no sign of life".
        self.pending.extend(key)
        self.pulls.upsert(
            PullRow(
                progress.engine,
                progress.model,
                stage=progress.stage,
                percent=progress.percent,
                completed=progress.completed,
                total=progress.total,
            )
        )

    def _end_pull(self, engine: str, model: str, error: str | None) -> None:
        """The one end of a pull: success drops its row, failure keeps it with the reason."""
        pull = self.pulls.get((engine, model))
        if pull is None or pull.failed:
            return  # already ended (the terminal push comes before the broker's answer)
        if error is None:
            self.pulls.remove(pull.key)
            return
        self.pulls.upsert(replace(pull, error=error, percent=None))
        self.command_failed.emit(f"Could not pull {model} ({engine_title(engine)}): {error}")

    def _show_nodes(self, snapshot: DiscoverySnapshot) -> None:
        remote = {node.node_id: node for node in snapshot.nodes if not self._is_self(node)}
        for node_id in self.models.nodes() - set(remote) - {self.node_id}:
            self.models.remove_where(node_id)
        for node in remote.values():
            self.models.sync_node(node.node_id, remote_rows(node))

    def _apply_discovery_event(self, event: DiscoveryEvent) -> None:
        if event.node_id == self.node_id:
            return  # this node's models come from the engine manager itself
        if event.event == "node_left":
            self.models.remove_where(event.node_id)
        elif event.node is not None and not self._is_self(event.node):
            self.models.sync_node(event.node_id, remote_rows(event.node))

    def _is_self(self, node: DiscoveredNode) -> bool:
        return node.node_id == self.node_id or "self" in node.sources
