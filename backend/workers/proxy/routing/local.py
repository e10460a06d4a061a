"""This node's own engines as routing sees them: one scheduler per engine, shaped by the table."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from backend.core.clock import Clock
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.scheduler.engine_access import LoadModel, LocalEngineAccess
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, EngineShape


class LocalSchedulers:
    """Owns the schedulers of the engines this node runs (each with its own tasks)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        load_model: LoadModel,
        *,
        clock: Clock,
        on_change: Callable[[], None],
        affinity: bool,
    ) -> None:
        self._session = session
        self._load_model = load_model
        self._clock = clock
        self._on_change = on_change
        self._affinity = affinity
        self._targets = ProxyTargets()
        self._schedulers: dict[str, EngineScheduler] = {}

    def table_changed(self, targets: ProxyTargets) -> None:
        """Reshape the schedulers of this node's engines by their new table entries."""
        self._targets = targets
        local = [
            (engine, target)
            for engine, found in targets.engines.items()
            for target in found
            if target.kind == "local"
        ]
        for engine, target in local:
            self.scheduler(engine).configure(shape_of(target))

    def scheduler(self, engine: str) -> EngineScheduler:
        """This node's scheduler for ``engine`` (made on first use)."""
        found = self._schedulers.get(engine)
        if found is None:
            access = LocalEngineAccess(
                engine, self._session, lambda: self._local(engine), self._load_model
            )
            found = EngineScheduler(
                engine,
                access,
                clock=self._clock,
                on_change=self._on_change,
                affinity=self._affinity,
            )
            self._schedulers[engine] = found
        return found

    def active(self) -> list[EngineScheduler]:
        """The schedulers of the engines this node runs, or that still have work."""
        local = {
            engine
            for engine, found in self._targets.engines.items()
            if any(t.kind == "local" for t in found)
        }
        return [
            scheduler
            for engine, scheduler in sorted(self._schedulers.items())
            if engine in local or scheduler.active
        ]

    async def close(self) -> None:
        """End every scheduler's own tasks."""
        for scheduler in self._schedulers.values():
            await scheduler.aclose()

    def _local(self, engine: str) -> RouteTarget | None:
        return next((t for t in self._targets.engines.get(engine, []) if t.kind == "local"), None)


def shape_of(target: RouteTarget) -> EngineShape:
    """What the scheduler needs from this node's routing-table entry for an engine."""
    return EngineShape(
        slots=max(target.slots, 1),
        model_slots=dict(target.model_slots),
        single_model=target.single_model,
        resident=tuple(target.resident),
        instance=target.instance,
        pinning=target.slot_api is not None,
        slots_known=target.slots_known,
        parking=target.slot_api is not None and target.slot_api.parks,
    )
