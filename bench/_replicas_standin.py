"""A stand-in for the replicas component in the replica benchmark: the real planner, driven by
waits estimated from the emulators' queues, its loads carried out with Ollama's warm-up request.

Not run by hand (``bench/replicas.py`` uses it with replicas on). The broker's component takes
placement's expected waits from the doors' demand reports; here every ``SAMPLE_S`` the wait of
a model is what its requests still without a first token have waited so far (the longest; the
queue forms at the door, which holds a request until a slot is free, so the engines' queues
say little), and the requests are the trace's arrivals since the last round. The lead swaps
this for the component once the broker runs it. Unloads are not carried out: the TTL outlasts a run.
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
        self.peak_wait_s: dict[str, float] = dict.fromkeys(MODELS, 0.0)
        self.waiting: dict[int, tuple[str, float]] = {}
        self._sent = 0

    def arrived(self, model: str) -> int:
        """One request of the trace for ``model`` was sent: its handle for ``answering``."""
        self.arrivals[model] += 1
        self._sent += 1
        self.waiting[self._sent] = (model, time.monotonic())
        return self._sent

    def answering(self, handle: int) -> None:
        """The request's first token came (or it ended): it no longer waits."""
        self.waiting.pop(handle, None)

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
            self.peak_wait_s[model] = max(self.peak_wait_s[model], wait_s)
            if self.arrivals[model]:
                self.samples[model].append(WaitSample(now, self.arrivals[model], wait_s, on=on))
            self.arrivals[model] = 0
            views.append(self._view(model, states, now))
        return plan(tuple(views), (), self.policy, now)

    def _estimate(self, model: str, states: list[dict[str, Any]]) -> tuple[float, str]:
        """The longest wait so far of ``model``'s requests without a first token, and the node
        holding the model with the most requests running (where they wait)."""
        now = time.monotonic()
        wait_s = max((now - at for m, at in self.waiting.values() if m == model), default=0.0)
        busiest = (0, "")
        for shape, state in zip(self.cluster.shapes, states, strict=True):
            for runner in state.get("loaded", []):
                if base_name(runner["name"]) == model:
                    busiest = max(busiest, (runner["active"], shape.node_id))
        return wait_s, busiest[1]

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
