"""The relay's one-timer watchdog: it cuts only a wait that outlived its own bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.workers.proxy.upstream import watchdog as watchdog_module
from backend.workers.proxy.upstream.watchdog import Watchdog


async def _waits(steps: list[tuple[str, float, float]]) -> str | None:
    """Run waits of (kind, bound, duration) under one watchdog; the kind that was cut."""
    watchdog = Watchdog()
    try:
        for kind, bound, duration in steps:
            watchdog.begin(kind, bound)
            await asyncio.sleep(duration)
        watchdog.end()
    except asyncio.CancelledError:
        assert watchdog.fired is not None and watchdog.uncancel()
        return watchdog.fired
    finally:
        watchdog.close()
    return None


async def test_waits_within_their_bounds_are_never_cut() -> None:
    # Alternating bounds of 0.05 s and 0.5 s, each wait well inside its own, for 0.3 s.
    steps = [("writing", 0.05, 0.01), ("reading", 0.5, 0.02)] * 10
    assert await _waits(steps) is None


async def test_a_short_bound_after_a_long_one_still_fires_on_time() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    cut = await _waits([("reading", 5.0, 0.01), ("writing", 0.05, 1.0)])
    assert cut == "writing"
    assert loop.time() - started < 0.5, "the long bound's timer was left in charge"


async def test_the_wait_that_outlived_its_bound_is_the_one_named() -> None:
    # The first wait's bound is 100 times its length, so a loaded machine cannot make it the
    # one that overran.
    assert await _waits([("writing", 1.0, 0.01), ("reading", 0.05, 2.0)]) == "reading"


async def test_an_unbounded_wait_is_not_cut() -> None:
    assert await _waits([("reading", 0.05, 0.01), ("reading", 0, 0.15)]) is None


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_watchdog() -> None:
    async def relay() -> None:
        watchdog = Watchdog()
        try:
            watchdog.begin("reading", 5.0)
            await asyncio.sleep(10)
        finally:
            assert watchdog.fired is None
            watchdog.close()

    task = asyncio.create_task(relay())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_waits_share_one_timer_and_each_is_cut_at_its_own_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Twenty tasks, each with a wait bounded at 0.1-0.29 s that lasts too long, beside twenty
    # whose waits end in time; the loop's one timer must cut each overdue wait at its own bound.
    loop = asyncio.get_running_loop()
    timers = 0
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal timers
        if isinstance(getattr(callback, "__self__", None), watchdog_module._Sweep):
            timers += 1
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)
    started = loop.time()
    cut_at: dict[int, float] = {}

    async def overdue(index: int) -> None:
        assert await _waits([("reading", 0.1 + index * 0.01, 2.0)]) == "reading"
        cut_at[index] = loop.time() - started

    async def in_time(index: int) -> None:
        assert await _waits([("writing", 0.3, 0.05), ("reading", 0.3, 0.05)]) is None

    await asyncio.gather(*(overdue(i) for i in range(20)), *(in_time(i) for i in range(20)))
    for index, elapsed in cut_at.items():
        assert 0.1 + index * 0.01 - 0.002 <= elapsed < 0.1 + index * 0.01 + 0.25, (index, elapsed)
    assert len(cut_at) == 20
    # One timer at a time: set once for the first wait, and again only after each cut (or
    # for an earlier deadline), never once per wait begun.
    assert timers <= 1 + 20 + 1, timers


async def test_a_closed_watchdog_is_forgotten_and_never_cut() -> None:
    cancelled = False

    async def closes_early() -> None:
        nonlocal cancelled
        watchdog = Watchdog()
        watchdog.begin("reading", 0.05)
        watchdog.close()
        # The loop's timer holds no closed watchdog (nor, through it, its task).
        assert watchdog not in watchdog_module._sweep_of(asyncio.get_running_loop()).watched
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            cancelled = True
            raise

    await asyncio.create_task(closes_early())
    assert not cancelled
