"""The supervisor loop with a patched clock: schedule, give-up, errors, recovery, stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from backend.core.component import Component, FatalError, NotReadyError
from backend.core.supervisor import Supervisor, crash_error_id
from backend.protocol.types.broker import ComponentInfo
from tests.fakes import FakeClock, RecordingErrors


class Scripted(Component):
    """Each run does what the next script entry says."""

    def __init__(self, name: str, clock: FakeClock, script: list[str]) -> None:
        super().__init__(name)
        self.clock = clock
        self.script = script
        self.runs = 0
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        step = self.script[min(self.runs, len(self.script) - 1)]
        self.runs += 1
        if step == "crash":
            raise RuntimeError(f"crash {self.runs}")
        if step == "crash-after-61s":
            await self.clock.sleep(61)
            raise RuntimeError("late crash")
        if step == "fatal":
            raise FatalError("misconfigured")
        if step == "not-ready":
            raise NotReadyError("waiting for a port")
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()


async def _until(predicate: Callable[[], bool], rounds: int = 10_000) -> None:
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


def _make(
    script: list[str],
) -> tuple[Supervisor, Scripted, FakeClock, RecordingErrors, list[ComponentInfo]]:
    clock, errors, events = FakeClock(), RecordingErrors(), []
    supervisor = Supervisor(errors=errors, clock=clock, on_change=events.append)
    component = Scripted("worker", clock, script)
    supervisor.add(component)
    return supervisor, component, clock, errors, events


async def test_crash_loop_follows_the_backoff_schedule_then_stays_down() -> None:
    supervisor, component, clock, errors, _ = _make(["crash"])
    supervisor.start()
    await _until(lambda: supervisor.snapshot()[0].status == "failed")
    assert clock.sleeps == [1, 2, 4, 8, 16]
    assert component.runs == 6
    info = supervisor.snapshot()[0]
    assert info.restarts == 5
    assert "stays down" in errors.open[crash_error_id("worker")]
    await asyncio.sleep(0)
    assert component.runs == 6, "a component that gave up must not be restarted by itself"
    await supervisor.stop()


async def test_crash_raises_the_sticky_error_and_recovery_clears_it() -> None:
    supervisor, component, _, errors, events = _make(["crash", "serve"])
    supervisor.start()
    await _until(lambda: component.runs == 2 and supervisor.snapshot()[0].status == "running")
    assert errors.raised == [crash_error_id("worker")]
    assert crash_error_id("worker") not in errors.open
    statuses = [event.status for event in events]
    assert statuses == ["running", "backoff", "starting", "running"]
    await supervisor.stop()
    assert supervisor.snapshot()[0].status == "stopped"


async def test_a_long_healthy_run_resets_the_attempt_count() -> None:
    supervisor, component, clock, _, _ = _make(["crash-after-61s"])
    supervisor.start()
    await _until(lambda: component.runs >= 8)
    backoffs = [seconds for seconds in clock.sleeps if seconds != 61]
    assert set(backoffs) == {1}
    await supervisor.stop()


async def test_fatal_error_leaves_it_down_without_restarts() -> None:
    supervisor, component, clock, errors, _ = _make(["fatal"])
    supervisor.start()
    await _until(lambda: supervisor.snapshot()[0].status == "failed")
    await asyncio.sleep(0)
    assert component.runs == 1
    assert clock.sleeps == []
    assert "misconfigured" in errors.open[crash_error_id("worker")]
    await supervisor.stop()


async def test_not_ready_retries_without_raising_a_crash_error() -> None:
    supervisor, component, clock, errors, _ = _make(["not-ready", "not-ready", "serve"])
    supervisor.start()
    await _until(lambda: component.runs == 3 and supervisor.snapshot()[0].status == "running")
    assert clock.sleeps == [1, 2]
    assert errors.raised == []
    await supervisor.stop()


async def test_restart_revives_a_component_that_gave_up() -> None:
    supervisor, component, _, errors, _ = _make(["crash"] * 6 + ["serve"])
    supervisor.start()
    await _until(lambda: supervisor.snapshot()[0].status == "failed")
    supervisor.restart("worker")
    await _until(lambda: component.runs == 7)
    assert supervisor.snapshot()[0].status == "running"
    assert not errors.open
    with pytest.raises(KeyError):
        supervisor.restart("nothing")
    await supervisor.stop()


async def test_restart_of_a_running_component_starts_a_new_run() -> None:
    supervisor, component, _, errors, _ = _make(["serve"])
    supervisor.start()
    await _until(lambda: component.runs == 1)
    supervisor.restart("worker")
    await _until(lambda: component.runs == 2)
    assert errors.raised == []
    await supervisor.stop()


async def test_stop_stops_components_that_ignore_stop_by_cancelling_them() -> None:
    class Stubborn(Component):
        async def run(self) -> None:
            await asyncio.Event().wait()

    clock, errors = FakeClock(), RecordingErrors()
    supervisor = Supervisor(errors=errors, clock=clock)
    supervisor.add(Stubborn("stubborn"))
    supervisor.start()
    await _until(lambda: supervisor.snapshot()[0].status == "running")
    await supervisor.stop(grace=0.05)
    assert supervisor.snapshot()[0].status == "stopped"
    assert errors.raised == []
