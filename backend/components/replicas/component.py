"""The replicas component: every ``interval`` seconds, while the planner is active, gather its
inputs (``inputs.py``), ask ``plan()`` what to load and unload, and carry it out
(``actions.py``); ``status()`` says what it manages."""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection, Sequence

from backend.components.replicas import inputs
from backend.components.replicas.actions import Actions, EngineAction, Key, RecordJobs
from backend.components.replicas.plan import Action, ModelView, Policy, Replica, plan
from backend.components.replicas.status import (
    ReplicaSettings,
    held_infos,
    is_active,
    settings_of,
    status_of,
)
from backend.core.clock import Clock
from backend.core.component import Component
from backend.protocol.proxy import DemandReport
from backend.protocol.types.engines import EngineModels
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.replicas import ReplicasStatus

log = logging.getLogger(__name__)

INTERVAL_S = 2.0
# This node's engines' lists are read once per round (their last sweep, where the engines
# component offers it without asking the engines); a slow read skips the round.
MODELS_DEADLINE_S = 10.0

Planner = Callable[[tuple[ModelView, ...], tuple[Replica, ...], Policy, float], tuple[Action, ...]]


class ReplicasComponent(Component):
    """Owns the demand history, the replicas its planner loaded (on any member) and one task
    group: the planning loop and one task per load or unload under way."""

    def __init__(
        self,
        *,
        node_id: str,
        node_name: Callable[[], str],
        clock: Clock,
        settings: Callable[[], object],
        members: Callable[[], Collection[str]],
        nodes: Callable[[], Sequence[DiscoveredNode]],
        engine_models: Callable[[], EngineModels | Awaitable[EngineModels]],
        local_action: EngineAction,
        member_action: EngineAction,
        record_jobs: RecordJobs,
        interval: float = INTERVAL_S,
        planner: Planner = plan,
    ) -> None:
        super().__init__("replicas")
        self._node_id = node_id
        self._node_name = node_name
        self._clock = clock
        self._settings = settings
        self._members = members
        self._nodes = nodes
        self._engine_models = engine_models
        self._interval = interval
        self._planner = planner
        self._history = inputs.DemandHistory()
        self._actions = Actions(
            node_id=node_id,
            node_name=node_name,
            clock=clock,
            local_action=local_action,
            member_action=member_action,
            record_jobs=record_jobs,
            run_id=f"replicas-{secrets.token_hex(4)}",
        )
        self._serving: dict[str, frozenset[tuple[str, str]]] = {}
        self._changed_at: dict[str, float] = {}
        # While inactive the planner does not watch the serving sets: the demand heard then
        # may describe a cluster that is gone (a replica since unloaded), so after a pause it
        # counts only samples from when it resumed.
        self._paused = False
        self._resumed_at: float | None = None
        self._last_models: EngineModels | None = None
        self._group: asyncio.TaskGroup | None = None
        self._stopped = asyncio.Event()
        # Set when the settings or the membership change: an inactive planner rests until then.
        self._inputs_changed = asyncio.Event()

    # Inputs ------------------------------------------------------------------------------------

    def inputs_changed(self) -> None:
        """The settings or the trusted members changed: a planner resting while inactive (off,
        or ``auto`` with no other member) looks again, a round after this."""
        self._inputs_changed.set()

    def on_demand(self, report: DemandReport) -> None:
        """Take one ``proxy:demand`` report from this node's proxy worker."""
        names: dict[str, str] = {}
        if any(demand.owners for demand in report.models):
            names = {node.node_id: node.name for node in self._nodes()}
            names[self._node_id] = self._node_name()
        self._history.add(report, names)

    # Queries -----------------------------------------------------------------------------------

    def current(self) -> tuple[ReplicaSettings, bool]:
        """The settings followed now and whether the planner is active under them."""
        settings = settings_of(self._settings())
        return settings, is_active(settings.mode, len(self._other_members()))

    def status(self) -> ReplicasStatus:
        """Mode, limits, and the replicas managed or held here (``replicas:status``)."""
        settings, active = self.current()
        models = self._last_models
        held = []
        if models is not None:
            used: dict[tuple[str, str], float] = {
                (engine, name): use.last_used_at
                for engine, by_name in models.replicas_by_engine.items()
                for name in by_name
                if (use := self._history.local_use(engine, name)) is not None
            }
            held = held_infos(self._node_id, self._node_name(), models.replicas_by_engine, used)
        return status_of(settings, active, self._actions.infos(), held)

    # Component ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan every ``interval`` seconds until stopped."""
        self._stopped.clear()
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self._loop(), name="replicas:plan")
                await self._stopped.wait()
                raise _Stopped
        except* _Stopped:
            pass
        finally:
            self._group = None

    async def stop(self) -> None:
        """Stop planning; loads and unloads under way are cancelled."""
        self._stopped.set()

    async def _loop(self) -> None:
        """A round every ``interval`` while active. A round that finds the planner inactive
        is the last until ``inputs_changed``: a node with no other member, or with replicas
        off, is not woken every interval to find so again."""
        failing = ""  # the last round's error: a planner that keeps failing is logged once
        while True:
            await self._clock.sleep(self._interval)
            self._inputs_changed.clear()
            try:
                await self.plan_once()
                failing = ""
            except Exception as exc:
                if repr(exc) != failing:
                    log.exception("replicas: a planning round failed")
                failing = repr(exc)
            if not self.current()[1]:
                await self._inputs_changed.wait()

    async def plan_once(self) -> tuple[Action, ...]:
        """One round: gather, plan, start what may start now. Returns the actions started."""
        settings, active = self.current()
        if not active:
            self._paused = True
            return ()
        try:
            async with asyncio.timeout(MODELS_DEADLINE_S):
                read = self._engine_models()
                models = await read if inspect.isawaitable(read) else read
        except (Exception, TimeoutError) as exc:
            log.debug("replicas: this node's models could not be read: %s", exc)
            return ()
        self._last_models = models
        now = self._clock.wall()
        if self._paused:
            self._paused, self._resumed_at = False, now
        views, resident = self._model_views(models, now)
        self._actions.forget_gone(resident)
        held = inputs.held_replicas(models, self._history)
        started = []
        for action in self._planner(views, held, settings.policy, now):
            work = self._actions.begin(action, ttl_s=settings.policy.ttl_s)
            if work is not None:
                self._spawn(work, action)
                started.append(action)
        return tuple(started)

    def _model_views(
        self, models: EngineModels, now: float
    ) -> tuple[tuple[ModelView, ...], set[Key]]:
        nodes = self._nodes()
        own = next((node for node in nodes if "self" in node.sources), None)
        places = [
            inputs.own_view(self._node_id, self._node_name(), models, own),
            *inputs.member_views(nodes, self._other_members()),
        ]
        loading = self._actions.loading()
        views: list[ModelView] = []
        resident: set[Key] = set()
        for model in self._history.models():
            hosts = inputs.hosts_for(model, self._history.digest(model), places, loading)
            resident |= {(h.node_id, h.engine, h.name) for h in hosts if h.resident}
            serving = inputs.serving_set(hosts)
            if self._serving.get(model) != serving:
                if model in self._serving:
                    self._changed_at[model] = now
                self._serving[model] = serving
            samples = self._history.samples(model)
            changed_at = self._changed_at.get(model)
            if self._resumed_at is not None:
                changed_at = max(changed_at or self._resumed_at, self._resumed_at)
            views.append(ModelView(model, samples, hosts, changed_at))
        for gone in self._serving.keys() - set(self._history.models()):
            del self._serving[gone]  # forgotten by the history: nobody asked for it lately
            self._changed_at.pop(gone, None)
        return tuple(views), resident

    def _other_members(self) -> list[str]:
        return [member for member in self._members() if member != self._node_id]

    def _spawn(self, work: Awaitable[None], action: Action) -> None:
        if self._group is None:
            raise RuntimeError("the replicas component is not running")
        name = f"replicas:{type(action).__name__.lower()}:{action.name}"
        self._group.create_task(_run(work), name=name)


async def _run(work: Awaitable[None]) -> None:
    await work


class _Stopped(Exception):
    """Leaves the task group when ``stop()`` was called."""
