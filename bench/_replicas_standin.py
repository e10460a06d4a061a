"""A stand-in for the replicas component in the replica benchmark: the real planner, driven by
waits estimated from the emulators' queues, its loads carried out with Ollama's warm-up request.

Not run by hand (``bench/replicas.py`` uses it with replicas on). The broker's component takes
placement's expected waits from the doors' demand reports; here every ``SAMPLE_S`` the wait of
a model is estimated as the best resident node's queue for it times the mean answer's time per
slot (a node that does not hold it anywhere: the shortest load time), and the requests are the
trace's arrivals since the last round. The lead swaps this for the component once the broker
runs it. Unloads are not carried out: the TTL outlasts a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import aiohttp
from _replicas_rig import KEEP_S, MODELS, SAMPLE_S, Cluster, base_name, load, resident_models
from _replicas_trace import MEAN_TOKENS

from backend.components.replicas.plan import Host, Load, ModelView, Policy, WaitSample, plan


class StandInPlanner:
    """Runs ``plan()`` every ``SAMPLE_S`` until stopped; counts arrivals via ``arrived``."""

    def __init__(self, cluster: Cluster, policy: Policy) -> None:
        self.cluster = cluster
        self.policy = policy
        self.arrivals: Counter[str] = Counter()
        self.samples: dict[str, list[WaitSample]] = {model: [] for model in MODELS}
        self.changed_at: dict[str, float] = {}
        self.loading: set[str] = set()
        self.loads: list[tuple[float, Load]] = []

    def arrived(self, model: str) -> None:
        """One request of the trace for ``model`` was sent."""
        self.arrivals[model] += 1

    async def run_until(self, done: asyncio.Event) -> None:
        """Plan and carry out the loads every ``SAMPLE_S`` until ``done``."""
        async with asyncio.TaskGroup() as group, aiohttp.ClientSession() as session:
            while not done.is_set():
                for action in await self._round():
                    if isinstance(action, Load):
                        self.loading.add(action.node_id)
                        group.create_task(self._load(session, action), name=f"load {action.model}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), SAMPLE_S)

    async def _round(self) -> tuple[object, ...]:
        states = await self.cluster.states()
        now = time.monotonic()
        views = []
        for model in MODELS:
            wait_s, on = self._estimate(model, states)
            if self.arrivals[model]:
                self.samples[model].append(WaitSample(now, self.arrivals[model], wait_s, on=on))
            self.arrivals[model] = 0
            views.append(self._view(model, states, now))
        return plan(tuple(views), (), self.policy, now)

    def _estimate(self, model: str, states: list[dict[str, Any]]) -> tuple[float, str]:
        """The expected wait of a new request for ``model`` at the best node, and that node."""
        best = (min(p.load_s for s in self.cluster.shapes for p in [s.paces[model]]), "")
        for shape, state in zip(self.cluster.shapes, states, strict=True):
            pace = shape.paces[model]
            for runner in state.get("loaded", []):
                if base_name(runner["name"]) == model:
                    service_s = MEAN_TOKENS / pace.tokens_per_s
                    wait_s = (runner["queued"] + 1) * service_s / pace.slots
                    best = min(best, (wait_s, shape.node_id))
        return best

    def _view(self, model: str, states: list[dict[str, Any]], now: float) -> ModelView:
        horizon = now - self.policy.stable_window_s
        self.samples[model] = [s for s in self.samples[model] if s.at > horizon]
        hosts = tuple(
            Host(
                node_id=shape.node_id,
                node_name=shape.node_id,
                engine="ollama",
                name=model,
                resident=model in resident_models(state),
                loading=shape.node_id in self.loading,
            )
            for shape, state in zip(self.cluster.shapes, states, strict=True)
        )
        return ModelView(model, tuple(self.samples[model]), hosts, self.changed_at.get(model))

    async def _load(self, session: aiohttp.ClientSession, action: Load) -> None:
        url = self._urls()[action.node_id]
        self.loads.append((time.monotonic(), action))
        try:
            await load(session, url, action.name, KEEP_S)
        finally:
            self.loading.discard(action.node_id)
            self.changed_at[action.model] = time.monotonic()
        await self.cluster.refresh()

    def _urls(self) -> Mapping[str, str]:
        shapes, emulators = self.cluster.shapes, self.cluster.emulators
        return {shape.node_id: e.url for shape, e in zip(shapes, emulators, strict=True)}
