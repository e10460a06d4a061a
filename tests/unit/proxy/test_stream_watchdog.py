"""The relay's one-timer watchdog: it cuts only a wait that outlived its own bound."""

from __future__ import annotations

import asyncio

import pytest

from backend.workers.proxy import watchdog as watchdog_module
from backend.workers.proxy.watchdog import Watchdog


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
    assert await _waits([("writing", 0.05, 0.01), ("reading", 0.05, 0.5)]) == "reading"


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


async def test_a_bound_past_the_horizon_is_cut_at_its_own_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The timer looks in every 0.05 s; the wait's bound of 0.3 s is what cuts it.
    monkeypatch.setattr(watchdog_module, "HORIZON_S", 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await _waits([("reading", 0.3, 2.0)]) == "reading"
    assert 0.29 <= loop.time() - started < 1.0
    assert await _waits([("reading", 0.3, 0.2), ("writing", 0.3, 0.2)]) is None
