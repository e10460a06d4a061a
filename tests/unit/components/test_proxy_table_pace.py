"""How often the broker looks for a new routing table for its proxy worker: ten times a second
while the table changes; once it has rested ``TARGETS_IDLE_AFTER_S``, twice a second and at
once when a source says it changed (``look_now``); back to the active pace at the first change.
``table_applied`` sends a changed table at once whatever the pace."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from backend.components.identity.certificate import mint
from backend.components.proxy import component as component_module
from backend.components.proxy.component import (
    TARGETS_IDLE_AFTER_S,
    TARGETS_IDLE_INTERVAL_S,
    TARGETS_INTERVAL_S,
    ProxyComponent,
)
from backend.core.worker import WorkerProcess
from backend.protocol.proxy import ProxyTargets
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.worker_methods import PROXY_TARGETS
from tests.fakes import FakeClock, settle


class Worker:
    """What the table loop uses of a running worker: its pid, and the notifications sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.pings = 0

    def pid(self) -> int:
        return 4242

    def notify(self, method: str, params: Any) -> None:
        self.sent.append((method, params))

    async def call(self, method: str, params: Any = None) -> Any:
        self.pings += 1
        return {}

    def tables(self) -> list[str]:
        return [params["node_id"] for method, params in self.sent if method == PROXY_TARGETS.name]


class Tables:
    """The routing table a source gives: ``node_id`` names its version; ``builds`` counts."""

    def __init__(self) -> None:
        self.version = "v1"
        self.builds = 0

    def __call__(self) -> ProxyTargets:
        self.builds += 1
        return ProxyTargets(node_id=self.version)


def _component(clock: FakeClock, tables: Tables) -> ProxyComponent:
    return ProxyComponent(
        ports=Ports(node=1, ollama=2, openai=3, llamacpp=4, relay=5),  # never opened here
        errors=cast(Any, None),
        clock=clock,
        targets=tables,
        credentials=mint(NodeId("node-a")),
        host="127.0.0.1",  # no binding follows the table's LAN access here
    )


@dataclass
class Rig:
    clock: FakeClock
    tables: Tables
    worker: Worker
    component: ProxyComponent
    task: asyncio.Task[None]


@contextlib.asynccontextmanager
async def _looping(clock: FakeClock) -> AsyncIterator[Rig]:
    """The table loop of a component with one worker, running until the block ends."""
    tables, worker = Tables(), Worker()
    component = _component(clock, tables)
    component._worker = cast(WorkerProcess, worker)
    task = asyncio.create_task(component._send_targets(cast(WorkerProcess, worker)))
    try:
        yield Rig(clock, tables, worker, component, task)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _run_until(clock: FakeClock, task: asyncio.Task[None], at: float) -> None:
    while clock.now < at:
        await asyncio.sleep(0)
        assert not task.done()


async def test_the_pace_slows_once_the_table_rests_and_quickens_at_a_change() -> None:
    async with _looping(FakeClock(0.0)) as rig:
        clock, tables, worker, task = rig.clock, rig.tables, rig.worker, rig.task
        await _run_until(clock, task, TARGETS_IDLE_AFTER_S + 3.0)
        assert worker.tables() == ["v1"]  # sent once, not again while unchanged
        active = [s for s in clock.sleeps if s == TARGETS_INTERVAL_S]
        # TARGETS_IDLE_AFTER_S of looks a tenth of a second apart (one more or less by rounding)
        assert abs(len(active) - round(TARGETS_IDLE_AFTER_S / TARGETS_INTERVAL_S)) <= 1
        rest = clock.sleeps[len(active) :]
        assert rest and set(rest) == {TARGETS_IDLE_INTERVAL_S}
        resting = len(clock.sleeps)
        tables.version = "v2"
        while len(clock.sleeps) < resting + 4:
            await asyncio.sleep(0)
        assert worker.tables() == ["v1", "v2"]  # found by the look after the resting sleep
        assert clock.sleeps[resting : resting + 4] == [TARGETS_INTERVAL_S] * 4  # active again


async def _rested(clock: FakeClock, task: asyncio.Task[None]) -> None:
    for _ in range(40):  # well past the resting point, a tenth of a second at a time
        await clock.advance(TARGETS_INTERVAL_S)
        assert not task.done()
    assert clock.sleeps[-1] == TARGETS_IDLE_INTERVAL_S


async def test_a_source_that_changed_is_looked_at_at_once_at_rest() -> None:
    async with _looping(FakeClock(0.0, on_sleep="wait")) as rig:
        clock, tables, worker = rig.clock, rig.tables, rig.worker
        await _rested(clock, rig.task)
        builds = tables.builds
        tables.version = "v2"
        await settle()
        assert worker.tables() == ["v1"]  # resting: not looked at yet
        rig.component.look_now()  # no clock moves from here on
        await settle()
        assert worker.tables() == ["v1", "v2"]
        assert tables.builds == builds + 1
        assert clock.sleeps[-1] == TARGETS_INTERVAL_S  # the active pace again


async def test_table_applied_sends_a_changed_table_at_once_at_rest() -> None:
    async with _looping(FakeClock(0.0, on_sleep="wait")) as rig:
        clock, tables, worker = rig.clock, rig.tables, rig.worker
        await _rested(clock, rig.task)
        tables.version = "v2"
        await asyncio.wait_for(rig.component.table_applied(), 1.0)  # no clock moved meanwhile
        assert worker.tables() == ["v1", "v2"]
        assert worker.pings == 1
        await clock.advance(TARGETS_IDLE_INTERVAL_S)
        assert worker.tables() == ["v1", "v2"]  # the loop finds it sent already


async def test_settled_waits_for_the_worker_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _looping(FakeClock(0.0, on_sleep="wait")) as rig:
        await _rested(rig.clock, rig.task)
        rig.tables.version = "v2"
        await asyncio.wait_for(rig.component.settled(), 1.0)
        assert rig.worker.tables() == ["v1", "v2"] and rig.worker.pings == 1

        # A worker that does not answer holds the caller SETTLE_TIMEOUT_S, then lets it go.
        answered = asyncio.Event()

        async def silent(method: str, params: Any = None) -> Any:
            await answered.wait()

        monkeypatch.setattr(rig.worker, "call", silent)
        monkeypatch.setattr(component_module, "SETTLE_TIMEOUT_S", 0.05)
        rig.tables.version = "v3"
        await asyncio.wait_for(rig.component.settled(), 1.0)
        assert rig.worker.tables() == ["v1", "v2", "v3"]  # sent, even if not confirmed

    # No worker running: nothing to wait for.
    idle = _component(FakeClock(0.0), Tables())
    await asyncio.wait_for(idle.settled(), 1.0)
