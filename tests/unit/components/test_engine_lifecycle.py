"""Engine lifecycle: the pure transition function, and the controller driven by fake drivers."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from msgspec.structs import replace

from backend.components.engines import lifecycle
from backend.components.engines.controller import EngineController, EngineHooks
from backend.components.engines.lifecycle import (
    Adopted,
    Command,
    Commanded,
    Crashed,
    CrashRestartDue,
    DaemonLaunched,
    Detected,
    Event,
    Exited,
    Lifecycle,
    PortChanged,
    Ready,
    SlotsCounted,
    Spawned,
    StartBegan,
    StartFailed,
    StopBegan,
    Stopped,
    Unhealthy,
    apply,
)
from backend.components.engines.manifest import (
    Manifest,
    build,
    bundled_documents,
    deep_merge,
)
from backend.core.restart_policy import Streak
from backend.protocol import errors
from backend.protocol.types.engines import EngineStatus
from tests.fakes import RecordingErrors, settle
from tests.unit.components.engine_fakes import T0, FakeWorld, manual_clock

BIN = Path("/opt/engine/bin/serve")


def after(*events: Event, state: Lifecycle | None = None) -> Lifecycle:
    """The state reached from ``state`` (an installed, stopped engine) through ``events``."""
    current = state if state is not None else Lifecycle(binary=BIN)
    for event in events:
        current = apply(current, event)
    return current


def running_owned(pid: int = 100, *, desired: bool | None = True) -> Lifecycle:
    """An engine PAIR started and wants running; its run began under the current revision."""
    start = Lifecycle(binary=BIN, desired=desired)
    return after(Commanded("start"), StartBegan(), Spawned(pid), Ready(at=T0, slots=2), state=start)


# -- commands ----------------------------------------------------------------------------------


def test_a_command_bumps_the_revision_and_an_explicit_start_or_stop_records_the_intent() -> None:
    idle = Lifecycle(binary=BIN)
    assert apply(idle, Commanded("start", explicit=True)) == replace(idle, revision=1, desired=True)
    assert apply(idle, Commanded("stop", explicit=True)) == replace(idle, revision=1, desired=False)
    assert apply(idle, Commanded("start")) == replace(idle, revision=1)
    others: tuple[Command, ...] = ("restart", "shutdown", "install", "uninstall")
    for command in others:
        assert apply(idle, Commanded(command, explicit=True)) == replace(idle, revision=1)


def test_a_command_alone_leaves_a_running_engine_and_its_run_alone() -> None:
    running = running_owned()
    again = apply(running, Commanded("start", explicit=True))
    assert again == replace(running, revision=running.revision + 1)
    assert not lifecycle.reported_changed(running, again), "the RPC reply answers a command"
    assert lifecycle.observes(again, running.revision), "its monitors still watch it"


def test_a_port_change_bumps_the_revision_and_ends_the_run() -> None:
    running = running_owned()
    moved = apply(running, PortChanged())
    assert moved == replace(running, revision=running.revision + 1, run=None)


def test_detection_moves_between_stopped_and_not_installed_only_when_idle() -> None:
    gone = apply(Lifecycle(binary=BIN), Detected(None))
    assert gone == Lifecycle(state="not-installed") and not gone.installed
    assert apply(gone, Detected(BIN)) == Lifecycle(binary=BIN)
    running = running_owned()
    assert apply(running, Detected(None)) == replace(running, binary=None)
    failed = Lifecycle(state="error", binary=BIN)
    assert apply(failed, Detected(None)) == replace(failed, binary=None)


# -- starting and stopping ---------------------------------------------------------------------


def test_adopting_serves_the_engine_without_owning_it() -> None:
    failed = Lifecycle(binary=BIN, state="error", error="it broke", revision=4)
    adopted = apply(failed, Adopted(at=T0, slots=3))
    expected = replace(
        failed, state="running", owner="adopted", error=None, slots=3, run=4, started_at=T0
    )
    assert adopted == expected
    assert adopted.adopted and not adopted.owned


def test_an_owned_start_begins_spawns_and_becomes_ready() -> None:
    failed = Lifecycle(binary=BIN, state="error", error="old", revision=2, run=1, restart_in=2.0)
    starting = apply(failed, StartBegan())
    assert starting == Lifecycle(binary=BIN, state="starting", revision=2)
    spawned = apply(starting, Spawned(321))
    assert spawned == replace(starting, owner="process", pid=321) and spawned.owned
    ready = apply(spawned, Ready(at=T0, slots=1))
    assert ready == replace(spawned, state="running", slots=1, run=2, started_at=T0)


def test_a_daemon_is_owned_from_the_moment_its_start_commands_run() -> None:
    starting = after(StartBegan())
    launched = apply(starting, DaemonLaunched())
    assert launched == replace(starting, owner="daemon") and launched.owned


def test_a_start_long_after_the_last_one_begins_a_new_restart_streak() -> None:
    starting = replace(running_owned(), state="starting", streak=Streak(3))
    assert apply(starting, Ready(at=T0 + 30, slots=1)).streak == Streak(3)
    assert apply(starting, Ready(at=T0 + 61, slots=1)).streak == Streak(0)


def test_a_failed_start_lets_go_of_everything_and_keeps_the_reason() -> None:
    failed = after(StartBegan(), Spawned(7), StartFailed("port busy"))
    assert failed == Lifecycle(binary=BIN, state="error", error="port busy")


def test_stopping_ends_the_run_then_owns_nothing() -> None:
    running = running_owned()
    stopping = apply(running, StopBegan())
    assert stopping == replace(running, state="stopping", run=None)
    stopped = apply(stopping, Stopped())
    assert stopped == replace(stopping, state="stopped", owner="nobody", pid=None, slots=None)
    uninstalled = apply(replace(stopping, binary=None), Stopped())
    assert uninstalled.state == "not-installed"


def test_a_stop_of_a_failed_engine_clears_the_error() -> None:
    stopped = apply(Lifecycle(binary=BIN, state="error", error="boom"), Stopped())
    assert stopped == Lifecycle(binary=BIN)


# -- observations --------------------------------------------------------------------------------


def test_an_exit_of_the_current_process_is_a_crash_with_a_restart_when_wanted() -> None:
    running = running_owned()
    crashed = apply(running, Exited(running.revision, 100, "exited with code -9", T0 + 5))
    revision = running.revision + 1
    assert crashed == replace(
        running,
        state="error",
        error="exited with code -9",
        owner="nobody",
        pid=None,
        revision=revision,
        run=revision,
        restart_in=1.0,
        streak=Streak(1),
    )


def test_a_crash_of_an_engine_nobody_asked_for_is_not_restarted() -> None:
    running = running_owned(desired=None)
    crashed = apply(running, Exited(running.revision, 100, "exited with code 1", T0 + 5))
    assert (crashed.state, crashed.restart_in, crashed.run) == ("error", None, None)


def test_restarts_back_off_and_give_up_after_five_quick_crashes() -> None:
    delays = []
    state = running_owned()
    for attempt in range(6):
        state = apply(state, Exited(state.revision, state.pid or 0, "crash", T0 + attempt))
        delays.append(state.restart_in)
        if state.restart_in is None:
            break
        due = CrashRestartDue(state.revision)
        state = after(due, StartBegan(), Spawned(200 + attempt), Ready(T0, 1), state=state)
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, None]


def test_an_exit_of_another_pid_is_not_a_crash_of_this_run() -> None:
    running = running_owned(pid=100)
    assert apply(running, Exited(running.revision, 99, "late", T0)) is running


def test_an_adopted_engine_that_went_silent_is_gone_not_crashed() -> None:
    adopted = apply(Lifecycle(binary=BIN, revision=3), Adopted(at=T0, slots=1))
    gone = apply(adopted, Unhealthy(3))
    assert gone == Lifecycle(binary=BIN, revision=4, started_at=T0)


def test_a_recount_changes_the_slots_of_the_run_it_read_and_nothing_else() -> None:
    adopted = apply(Lifecycle(binary=BIN, revision=3), Adopted(at=T0, slots=64))
    assert apply(adopted, SlotsCounted(3, 4)) == replace(adopted, slots=4)
    assert apply(adopted, SlotsCounted(2, 4)) is adopted, "read from an earlier run"
    gone = apply(adopted, Unhealthy(3))
    assert apply(gone, SlotsCounted(3, 4)) is gone, "nothing runs any more"


def test_an_owned_engine_that_went_silent_is_stopped_then_recorded_as_crashed() -> None:
    running = running_owned()
    fenced = apply(running, Unhealthy(running.revision))
    assert fenced == replace(running, revision=running.revision + 1, run=None)
    crashed = after(StopBegan(), Stopped(), Crashed("silent", T0 + 100), state=fenced)
    assert (crashed.state, crashed.error, crashed.restart_in, crashed.run) == (
        "error",
        "silent",
        1.0,
        fenced.revision,
    )


def test_a_due_crash_restart_bumps_the_revision_only_while_the_engine_is_wanted() -> None:
    running = running_owned()
    crashed = apply(running, Exited(running.revision, 100, "crash", T0))
    due = apply(crashed, CrashRestartDue(crashed.revision))
    assert due == replace(crashed, revision=crashed.revision + 1, run=None, restart_in=None)
    unwanted = replace(crashed, desired=False)
    assert apply(unwanted, CrashRestartDue(crashed.revision)) is unwanted


# What the controller applies for a newer command, from whatever state the engine is in.


def _launched(pid: int) -> list[Event]:
    return [StartBegan(), Spawned(pid), Ready(at=T0 + 1, slots=1)]


def _stopping(state: Lifecycle) -> list[Event]:
    return [StopBegan(), Stopped()] if state.owned else [Stopped()]


def _newer_start(state: Lifecycle, pid: int = 999) -> Lifecycle:
    command = Commanded("restart" if state.running else "start", explicit=True)
    return after(command, *_stopping(state), *_launched(pid), state=state)


def _newer_stop(state: Lifecycle) -> Lifecycle:
    return after(Commanded("stop", explicit=True), *_stopping(state), state=state)


def _newer_port_change(state: Lifecycle) -> Lifecycle:
    restart = [*_stopping(state), *_launched(999)] if state.running else []
    return after(PortChanged(), *restart, state=state)


NEWER_COMMANDS = {"start": _newer_start, "stop": _newer_stop, "port change": _newer_port_change}


@pytest.mark.parametrize("newer", NEWER_COMMANDS.values(), ids=NEWER_COMMANDS.keys())
@pytest.mark.parametrize("observation", ["exit", "health"])
def test_a_stale_observation_never_undoes_a_newer_command(
    newer: Callable[[Lifecycle], Lifecycle], observation: str
) -> None:
    old = running_owned(pid=100)
    current = newer(old)
    late: Event = (
        Exited(old.revision, 100, "exited", T0 + 2)
        if observation == "exit"
        else Unhealthy(old.revision)
    )
    assert apply(current, late) is current


def test_a_stale_exit_is_ignored_even_when_the_new_process_got_the_same_pid() -> None:
    old = running_owned(pid=100)
    current = _newer_start(old, pid=100)
    assert apply(current, Exited(old.revision, 100, "exited", T0 + 2)) is current


@pytest.mark.parametrize("newer", NEWER_COMMANDS.values(), ids=NEWER_COMMANDS.keys())
def test_a_stale_crash_restart_never_undoes_a_newer_command(
    newer: Callable[[Lifecycle], Lifecycle],
) -> None:
    running = running_owned()
    crashed = apply(running, Exited(running.revision, 100, "crash", T0))
    current = newer(crashed)
    assert apply(current, CrashRestartDue(crashed.revision)) is current


def test_the_status_shows_slots_only_while_running() -> None:
    manifest = _manifest()
    status = lifecycle.status_of(manifest, running_owned(pid=5))
    assert (status.state, status.pid, status.slots, status.adopted) == ("running", 5, 2, False)
    stopping = lifecycle.status_of(manifest, apply(running_owned(), StopBegan()))
    assert stopping.slots is None


# -- the controller, with fake drivers -------------------------------------------------------


class Harness:
    """One controller over a fake world, with everything it reported."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.world = FakeWorld()
        self.clock = manual_clock()
        self.errors = RecordingErrors()
        self.pushed: list[EngineStatus] = []
        self.saved: list[bool] = []
        self.controller = EngineController(
            _manifest(),
            session=session,
            clock=self.clock,
            hooks=EngineHooks(
                errors=self.errors,
                on_change=self.pushed.append,
                save_desired=self._save_desired,
                record_process=self._ignore,
                forget_process=self._ignore,
            ),
            install_dir=Path("/nonexistent"),
            drivers=self.world.drivers(),
        )

    @property
    def port(self) -> int:
        return self.controller.port

    async def _save_desired(self, name: str, desired: bool) -> None:
        self.saved.append(desired)

    async def _ignore(self, *_: object) -> None:
        return None


def _manifest() -> Manifest:
    # The running Python is an executable file for detection; health probes are left out so
    # only the exit watcher observes the engine.
    override = {"detect": [{"path": sys.executable}], "runtime": {"health": None}}
    return build(deep_merge(bundled_documents()["ollama"], override), "test")


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with aiohttp.ClientSession() as session:
        made = Harness(session)
        await made.controller.detect()
        yield made
        for process in made.world.spawned:
            process.finish_output()
        await made.controller.shutdown()


async def test_start_adopts_an_engine_already_answering_and_never_stops_it(
    harness: Harness,
) -> None:
    harness.world.answering.add(harness.port)
    status = await harness.controller.start()
    assert (status.state, status.adopted, status.pid) == ("running", True, None)
    assert harness.world.spawned == []
    with pytest.raises(errors.Conflict, match="not started by PAIR"):
        await harness.controller.stop()
    assert harness.saved == [True, False], "the intent is saved all the same"
    assert harness.controller.status().state == "running"


async def test_a_port_held_by_another_program_is_a_conflict_and_nothing_is_killed(
    harness: Harness,
) -> None:
    harness.world.listening.add(harness.port)
    with pytest.raises(errors.Conflict, match=f"port {harness.port} is in use by another") as held:
        await harness.controller.start()
    # A second node on this computer meets its twin's engine port: the way out is named.
    assert "`pair engine set-port ollama PORT`" in held.value.message
    status = harness.controller.status()
    assert (status.state, status.pid, status.adopted) == ("error", None, False)
    assert harness.world.spawned == [], "nothing was started, so nothing is stopped"
    assert "engine:start-failed:ollama" in harness.errors.open


async def test_a_late_exit_of_the_old_process_after_a_restart_does_not_crash_the_new_one(
    harness: Harness,
) -> None:
    await harness.controller.start()
    old = harness.world.spawned[0]
    old.exit(-9, output_done=False)  # it dies just as a restart begins
    await settle()
    assert old.draining, "its exit watcher woke and waits for the last output"
    # The restart cancels the watcher, which (like EngineProcess.wait) swallows that while
    # draining and reports the exit after the stop began: late, so it must be ignored.
    status = await harness.controller.restart()
    assert (status.state, status.pid) == ("running", 1001)
    assert old.stopped
    await settle()
    assert harness.controller.status().state == "running"
    assert "engine:crashed:ollama" not in harness.errors.raised
    assert all(pushed.state != "error" for pushed in harness.pushed)


async def test_a_crashed_engine_is_coming_back_only_while_its_restart_is_due(
    harness: Harness,
) -> None:
    controller = harness.controller
    await controller.start()
    assert not controller.coming_back, "a running engine is not away"
    harness.world.spawned[0].exit(-9)
    await settle()
    assert controller.coming_back, "wanted, and its restart is due in 1 s"
    harness.world.spawning.clear()  # the restart's spawn waits
    await harness.clock.advance(1.0)
    assert controller.status().state == "starting" and controller.coming_back
    harness.world.spawning.set()
    await settle()
    assert controller.status().state == "running" and not controller.coming_back
    await controller.stop()
    assert not controller.coming_back, "stopped on purpose: its models are not found"


async def test_an_engine_whose_restarts_are_given_up_on_is_not_coming_back(
    harness: Harness,
) -> None:
    controller = harness.controller
    await controller.start()
    for delay in (1.0, 2.0, 4.0, 8.0, 16.0):
        harness.world.spawned[-1].exit(-9)  # quick crashes: the backoff grows, then ends
        await settle()
        assert controller.coming_back
        await harness.clock.advance(delay)
        assert controller.status().state == "running"
    harness.world.spawned[-1].exit(-9)
    await settle()
    assert controller.status().state == "error" and not controller.coming_back


async def test_a_crash_is_reported_and_a_wanted_engine_restarts_after_the_backoff(
    harness: Harness,
) -> None:
    await harness.controller.start()
    harness.world.spawned[0].exit(-9)
    await settle()
    status = harness.controller.status()
    assert (status.state, status.pid) == ("error", None)
    assert status.error is not None and status.error.startswith("exited with code -9; last output")
    assert "restarting in 1 s" in harness.errors.open["engine:crashed:ollama"]
    await harness.clock.advance(1.0)
    status = harness.controller.status()
    assert (status.state, status.pid) == ("running", 1001)
    assert "engine:crashed:ollama" not in harness.errors.open


async def test_a_stop_during_the_backoff_cancels_the_crash_restart(harness: Harness) -> None:
    await harness.controller.start()
    harness.world.spawned[0].exit(-9)
    await settle()
    await harness.controller.stop()
    await harness.clock.advance(60.0)
    assert harness.controller.status().state == "stopped"
    assert len(harness.world.spawned) == 1


async def test_a_start_of_a_running_engine_keeps_watching_it(harness: Harness) -> None:
    await harness.controller.start()
    again = await harness.controller.start()
    assert (again.state, len(harness.world.spawned)) == ("running", 1)
    harness.world.spawned[0].exit(-9)
    await settle()
    assert harness.controller.status().state == "error", "the crash is still noticed"
