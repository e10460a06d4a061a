"""The Ollama emulator's scheduler with a patched clock: keep_alive, queue limit, eviction."""

from __future__ import annotations

import asyncio

import pytest

from backend.devtools.emulators.catalog import spec_for
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama_scheduler import OllamaLimits, OllamaScheduler, ServerBusy
from tests.fakes import FakeClock

SECOND = 1_000_000_000


def _scheduler(clock: FakeClock, **limits: int) -> OllamaScheduler:
    return OllamaScheduler(
        clock=clock, timing=TimingModel(load_delay=1.0), limits=OllamaLimits(**limits)
    )


async def test_emulator_runner_expires_after_keep_alive_once_idle() -> None:
    clock = FakeClock()
    scheduler = _scheduler(clock)
    spec = spec_for("llama3.2:latest", 0)
    async with scheduler.using(spec, None, 10 * SECOND):
        assert scheduler.reap_expired() is None, "a busy runner never expires"
    assert scheduler.reap_expired() == pytest.approx(10.0)
    clock.now += 11
    scheduler.reap_expired()
    assert scheduler.runners == {}
    assert clock.sleeps == [1.0], "one load"


async def test_emulator_keep_alive_zero_unloads_when_the_last_request_ends() -> None:
    scheduler = _scheduler(FakeClock())
    spec = spec_for("llama3.2:latest", 0)
    async with scheduler.using(spec, None, 0):
        assert list(scheduler.runners) == ["llama3.2:latest"]
    assert scheduler.runners == {}


async def test_emulator_evicts_the_least_recently_used_idle_runner() -> None:
    clock = FakeClock()
    scheduler = _scheduler(clock, max_loaded=2)
    specs = [spec_for(f"model{n}:latest", 0) for n in range(3)]
    for spec in specs:
        async with scheduler.using(spec, None, None):
            clock.now += 1
    assert list(scheduler.runners) == ["model1:latest", "model2:latest"]


async def test_emulator_different_num_ctx_reloads_the_runner() -> None:
    clock = FakeClock()
    scheduler = _scheduler(clock)
    spec = spec_for("llama3.2:latest", 0)
    async with scheduler.using(spec, None, None):
        pass
    async with scheduler.using(spec, 8192, None) as runner:
        assert runner.context_length == 8192
    assert len(clock.sleeps) == 2


async def test_emulator_full_pending_queue_is_server_busy() -> None:
    scheduler = _scheduler(FakeClock(), max_queue=0)
    with pytest.raises(ServerBusy, match="maximum pending requests exceeded"):
        await scheduler.schedule(spec_for("llama3.2:latest", 0), None, None)
    await asyncio.sleep(0)
    await scheduler.stop()
