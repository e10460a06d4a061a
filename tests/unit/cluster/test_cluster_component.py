"""The cluster component's stop ends its run at once, not at the invite clock's next tick
(a broker's shutdown waits for it); the clock ticks only while something can expire."""

from __future__ import annotations

import asyncio

from backend.components.cluster.component import ClusterComponent
from tests.fakes import FakeClock, settle


class _Roster:
    """No push is ever requested."""

    async def wait_for_push_request(self) -> None:
        await asyncio.Event().wait()

    async def push_all(self) -> None:
        raise AssertionError("nothing asked for a push")


class _Service:
    """Counts the invite clock's ticks; ``pending`` says whether anything can expire."""

    def __init__(self, pending: bool = True) -> None:
        self.roster = _Roster()
        self.expired = 0
        self.pending = pending
        self.deadline_added = asyncio.Event()

    async def expire(self) -> None:
        self.expired += 1

    def has_deadlines(self) -> bool:
        return self.pending


async def test_stop_ends_the_run_while_the_tick_is_still_waiting() -> None:
    clock = FakeClock(on_sleep="wait")  # a tick's sleep ends only when the test moves time on
    service = _Service()
    component = ClusterComponent(service, clock=clock, tick=1.0)  # type: ignore[arg-type]
    run = asyncio.create_task(component.run())
    await settle()
    assert service.expired == 1 and 1.0 in clock.sleeps
    await component.stop()
    async with asyncio.timeout(5):
        await run
    assert service.expired == 1, "no tick ran after the stop"


async def test_the_invite_clock_ticks_every_interval() -> None:
    clock = FakeClock(on_sleep="wait")
    service = _Service()
    component = ClusterComponent(service, clock=clock, tick=1.0)  # type: ignore[arg-type]
    run = asyncio.create_task(component.run())
    await settle()
    for ticks in (2, 3):
        await clock.advance(1.0)
        assert service.expired == ticks
    await component.stop()
    async with asyncio.timeout(5):
        await run


async def test_at_rest_the_clock_waits_for_an_invite_not_a_tick() -> None:
    clock = FakeClock(on_sleep="wait")
    service = _Service(pending=False)
    component = ClusterComponent(service, clock=clock, tick=1.0)  # type: ignore[arg-type]
    run = asyncio.create_task(component.run())
    await settle()
    assert service.expired == 1 and 1.0 not in clock.sleeps  # nothing to expire: no timer
    await clock.advance(5.0)
    assert service.expired == 1
    service.pending = True  # an invite was sent: it expires at its time
    service.deadline_added.set()
    await settle()
    assert service.expired == 2 and 1.0 in clock.sleeps
    await clock.advance(1.0)
    assert service.expired == 3
    await component.stop()
    async with asyncio.timeout(5):
        await run
