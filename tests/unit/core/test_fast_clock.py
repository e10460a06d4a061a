"""The supervision clock knob: a clock that runs faster, with readings and sleeps that agree."""

from __future__ import annotations

import asyncio
import time

import pytest

from backend.core.clock import SUPERVISION_SPEED_ENV, FastClock, SystemClock, supervision_clock


class ManualClock:
    """A clock moved by hand; ``sleep`` records what it was asked and moves the clock so far."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_readings_run_speed_times_faster_and_a_sleep_takes_its_share() -> None:
    base = ManualClock()
    fast = FastClock(base, 8.0)
    start, start_wall = fast.monotonic(), fast.wall()
    assert (start, start_wall) == (100.0, 1_000_100.0)
    await fast.sleep(16.0)
    assert base.slept == [2.0]
    assert fast.monotonic() - start == 16.0
    assert fast.wall() - start_wall == 16.0
    base.now += 0.5
    assert fast.monotonic() - start == 20.0


def test_the_environment_chooses_the_supervision_clock() -> None:
    base = SystemClock()
    assert supervision_clock(base, {}) is base
    for ignored in ("", "fast", "1", "0.5", "-3", "inf", "nan"):
        assert supervision_clock(base, {SUPERVISION_SPEED_ENV: ignored}) is base, ignored
    fast = supervision_clock(base, {SUPERVISION_SPEED_ENV: "10"})
    assert isinstance(fast, FastClock)


async def test_a_fast_system_clock_sleeps_less_in_real_time() -> None:
    fast = FastClock(SystemClock(), 50.0)
    begun = fast.monotonic()
    real = time.monotonic()
    await asyncio.sleep(0)
    await fast.sleep(5.0)
    assert fast.monotonic() - begun >= 5.0
    assert time.monotonic() - real >= 5.0 / 50.0
    assert fast.monotonic() - begun == pytest.approx((time.monotonic() - real) * 50.0, abs=0.5)
