"""The engine manager's lifecycle rules, each pinned by a test that fails when it is broken:
a command-mode engine is stopped only once its endpoint closed; late observations never undo a
newer command; a cancelled start still stops the daemon it started, and a start that ran
nothing stops nothing; an adopted engine stopped outside PAIR is let go within seconds; a
failed shutdown sweep is retried; an inventory sweep over its budget fails and the last lists
stay. Controllers run over fake drivers and fake clocks (no subprocesses)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backend.components.engines import inventory
from backend.components.engines.component import EnginesComponent
from backend.components.engines.engine_run import ADOPTED_PORT_CHECK_S
from backend.components.engines.manifest import Manifest
from backend.components.nodeinfo.payload import last_engine_models
from backend.protocol import errors
from backend.protocol.types.engines import EngineModelsChanged
from tests.fakes import FakeClock, settle
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeDaemonWorld,
    FakeWorld,
    RecordedEvents,
    bundled_manifest,
    drive,
    engines_over,
    eventually,
    rig,
)

HEALTH = {"http": "/v1/models", "timeout_s": 5, "interval_s": 10}


@dataclass
class FakeLmStudio:
    """What LM Studio's HTTP API answers (no model loaded); ``held`` blocks every answer."""

    tags: list[str]
    held: asyncio.Event

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{path:.*}", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.StreamResponse:
        await self.held.wait()
        if request.path == "/api/tags":
            return web.json_response({"models": [{"name": n, "size": 1} for n in self.tags]})
        return web.json_response({"models": []})


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, FakeLmStudio]]:
    """A fake engine's HTTP API on a free port: (port, engine)."""
    held = asyncio.Event()
    held.set()
    fake = FakeLmStudio(["m"], held)
    async with TestServer(fake.app()) as running:
        assert running.port is not None
        yield running.port, fake
        held.set()


async def _daemon(
    session: aiohttp.ClientSession, port: int, tmp_path: Path, *, health: bool = True
) -> ControllerRig:
    """LM Studio (command mode) on ``port`` over a fake daemon, detected."""
    change: dict[str, Any] = {"runtime": {"port": port, "health": HEALTH if health else None}}
    made = rig(bundled_manifest("lmstudio", change), session, tmp_path, world=FakeDaemonWorld())
    await made.controller.detect()
    return made


def _world(made: ControllerRig) -> FakeDaemonWorld:
    assert isinstance(made.world, FakeDaemonWorld)
    return made.world


@pytest.fixture
async def lmstudio(
    server: tuple[int, FakeLmStudio], tmp_path: Path
) -> AsyncIterator[ControllerRig]:
    async with aiohttp.ClientSession() as session:
        made = await _daemon(session, server[0], tmp_path)
        yield made
        _world(made).stop_works, _world(made).stop_code = True, 0
        await drive(made.clock, made.controller.shutdown())


# -- 1. a command-mode engine is stopped once its endpoint closed ------------------------------


async def test_a_command_engine_reports_stopped_only_once_its_endpoint_closed(
    lmstudio: ControllerRig,
) -> None:
    world, controller = _world(lmstudio), lmstudio.controller
    await controller.start()
    world.stop_works = False  # `lms server stop` exits 0, the server takes a while to go
    stopping = asyncio.ensure_future(controller.stop())
    await lmstudio.clock.advance(5.0)
    assert not stopping.done()
    assert controller.status().state == "stopping", "not stopped while the port answers"
    world.daemons.clear()
    status = await drive(lmstudio.clock, stopping)
    assert (status.state, status.adopted) == ("stopped", False)


async def test_a_failed_stop_command_is_a_stop_once_the_endpoint_is_confirmed_closed(
    lmstudio: ControllerRig,
) -> None:
    world = _world(lmstudio)
    await lmstudio.controller.start()
    world.stop_code = 1
    status = await drive(lmstudio.clock, lmstudio.controller.stop())
    assert status.state == "stopped"


async def test_a_failed_stop_says_why_and_resumes_health_monitoring(
    lmstudio: ControllerRig,
) -> None:
    world, controller = _world(lmstudio), lmstudio.controller
    await controller.start()
    world.stop_code, world.stop_works = 1, False
    with pytest.raises(errors.InternalError) as failed:
        await drive(lmstudio.clock, controller.stop())
    message = failed.value.message
    assert "LM Studio did not stop: `" in message and "server stop` exited with 1" in message
    assert "keeps running and PAIR watches it again" in message
    status = controller.status()
    assert (status.state, status.desired, controller.owned) == ("running", False, True)
    world.daemons.clear()  # it dies later: the health probes notice
    for _ in range(3):
        await lmstudio.clock.advance(10.0)
    await eventually(lambda: controller.status().state == "error")
    assert "answered no health probe" in (controller.status().error or "")


async def test_a_stop_whose_endpoint_never_closes_fails_after_the_grace_time(
    lmstudio: ControllerRig,
) -> None:
    _world(lmstudio).stop_works = False
    await lmstudio.controller.start()
    with pytest.raises(errors.InternalError, match=r"port \d+ still answers after 10 s"):
        await drive(lmstudio.clock, lmstudio.controller.stop())
    assert lmstudio.controller.status().state == "running"


# -- 2. a late observation never undoes a newer start, stop or port change ---------------------


@pytest.fixture
async def ollama(tmp_path: Path) -> AsyncIterator[ControllerRig]:
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama"), session, tmp_path)
        await made.controller.detect()
        yield made
        for process in made.world.spawned:
            process.finish_output()
        await made.controller.shutdown()


async def _restart(made: ControllerRig) -> None:
    await made.controller.restart()


async def _stop(made: ControllerRig) -> None:
    await made.controller.stop()


async def _move(made: ControllerRig) -> None:
    port = made.controller.port + 1
    await made.controller.replace_manifest(bundled_manifest("ollama", {"runtime": {"port": port}}))


NEWER: dict[str, Callable[[ControllerRig], Awaitable[None]]] = {
    "restart": _restart,
    "stop": _stop,
    "port change": _move,
}


@pytest.mark.parametrize("newer", NEWER.values(), ids=NEWER.keys())
@pytest.mark.parametrize("observation", ["exit", "health"])
async def test_a_late_observation_of_the_old_run_never_undoes_a_newer_command(
    ollama: ControllerRig, newer: Callable[[ControllerRig], Awaitable[None]], observation: str
) -> None:
    controller = ollama.controller
    await controller.start()
    old_run, old = controller._life.run, ollama.world.spawned[0]
    assert old_run is not None
    ollama.world.spawned.remove(old)  # so a new process gets the old pid again (PID reuse)
    await newer(ollama)
    assert old.stopped
    before = controller.status()
    # Delivered on purpose, as a watcher that woke just before the newer command would.
    if observation == "exit":
        await controller._watch_exit(old, old_run)
    else:
        await controller._on_unhealthy(old_run, 15.0)
    await settle()
    assert controller.status() == before
    assert "engine:crashed:ollama" not in ollama.errors.raised


async def _start(made: ControllerRig) -> None:
    await made.controller.start()


@pytest.mark.parametrize("newer", [_start, _restart, _move], ids=["start", "restart", "port move"])
async def test_a_due_crash_restart_never_undoes_a_newer_command(
    ollama: ControllerRig, newer: Callable[[ControllerRig], Awaitable[None]]
) -> None:
    controller = ollama.controller
    await controller.start()
    ollama.world.spawned[0].exit(-9)
    await settle()
    crashed_run = controller._life.run
    assert crashed_run is not None and controller._life.restart_in == 1.0, "a restart is due"
    await controller.start()  # the user starts it before the backoff is over
    await newer(ollama)
    before, spawned = controller.status(), len(ollama.world.spawned)
    # The crash-restart of the old run comes due now (delivered on purpose: a stop cancels
    # the timer, a start alone does not).
    late = asyncio.ensure_future(controller._restart_after(1.0, crashed_run))
    await settle()
    await ollama.clock.advance(1.0)
    await late
    assert (controller.status(), len(ollama.world.spawned)) == (before, spawned)


# -- 3. a cancelled start still stops its daemon; a start that ran nothing stops nothing -------


async def test_a_start_cancelled_mid_way_still_stops_the_daemon_it_started(
    lmstudio: ControllerRig,
) -> None:
    world = _world(lmstudio)
    world.start_held.clear()  # `lms server start` detached the daemon and is still verifying
    starting = asyncio.ensure_future(lmstudio.controller.start())
    await eventually(lambda: bool(world.daemons))
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drive(lmstudio.clock, starting)
    assert len(world.stops()) == 1 and world.daemons == set()
    status = lmstudio.controller.status()
    assert (status.state, status.error, lmstudio.controller.owned) == (
        "error",
        "start cancelled",
        False,
    )


async def test_a_start_command_that_failed_after_it_ran_is_cleaned_up(
    lmstudio: ControllerRig,
) -> None:
    world = _world(lmstudio)
    world.start_code = 1
    with pytest.raises(errors.InternalError, match="LM Studio did not start"):
        await drive(lmstudio.clock, lmstudio.controller.start())
    assert len(world.stops()) == 1 and world.daemons == set()


async def test_a_start_command_that_could_not_run_authorises_no_cleanup(
    lmstudio: ControllerRig,
) -> None:
    world = _world(lmstudio)
    world.start_runs = False
    with pytest.raises(errors.InternalError, match="exited with 127"):
        await drive(lmstudio.clock, lmstudio.controller.start())
    assert world.stops() == [], "PAIR started nothing, so it stops nothing"
    assert lmstudio.controller.status().state == "error"


# -- 4. an adopted engine stopped outside PAIR is let go within seconds ------------------------


async def test_an_adopted_engine_stopped_outside_pair_is_let_go_within_seconds(
    tmp_path: Path,
) -> None:
    health = {"http": "/api/version", "timeout_s": 5, "interval_s": 5}
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama", {"runtime": {"health": health}}), session, tmp_path)
        await made.controller.detect()
        made.world.answering.add(made.controller.port)
        assert (await made.controller.start()).adopted
        await settle()  # its monitors watch it
        made.world.answering.clear()  # its owner stopped it
        await made.clock.advance(ADOPTED_PORT_CHECK_S)
        assert made.controller.status().state == "running", "one closed look is not enough"
        await made.clock.advance(ADOPTED_PORT_CHECK_S)
        status = made.controller.status()
        assert (status.state, status.adopted, status.error) == ("stopped", False, None)
        assert "engine:crashed:ollama" not in made.errors.raised
        await made.controller.shutdown()


async def test_an_adopted_engine_whose_port_closed_once_is_kept(tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama"), session, tmp_path)
        await made.controller.detect()
        made.world.answering.add(made.controller.port)
        await made.controller.start()
        await settle()
        made.world.answering.clear()
        await made.clock.advance(ADOPTED_PORT_CHECK_S)
        made.world.answering.add(made.controller.port)
        for _ in range(5):
            await made.clock.advance(ADOPTED_PORT_CHECK_S)
        assert made.controller.status().adopted
        await made.controller.shutdown()


# -- 5. a shutdown sweep that failed is retried ------------------------------------------------


def _component(tmp_path: Path, **controllers: ControllerRig) -> EnginesComponent:
    return engines_over(tmp_path, controllers)[0]


async def test_a_failed_shutdown_sweep_is_retried_by_the_next_call(
    lmstudio: ControllerRig, tmp_path: Path
) -> None:
    world = _world(lmstudio)
    engines = _component(tmp_path, lmstudio=lmstudio)
    await lmstudio.controller.start()
    world.stop_code, world.stop_works = 1, False
    with pytest.raises(errors.InternalError, match="engines PAIR started did not stop: lmstudio"):
        await drive(lmstudio.clock, engines.prepare_shutdown())
    assert lmstudio.controller.status().state == "running"
    world.stop_code, world.stop_works = 0, True
    await drive(lmstudio.clock, engines.prepare_shutdown())
    status = lmstudio.controller.status()
    assert (status.state, len(world.stops())) == ("stopped", 2)


async def test_concurrent_shutdown_callers_join_one_sweep(
    ollama: ControllerRig, tmp_path: Path
) -> None:
    engines = _component(tmp_path, ollama=ollama)
    await ollama.controller.start()
    revision = ollama.controller.status().revision
    await asyncio.gather(engines.prepare_shutdown(), engines.prepare_shutdown())
    status = ollama.controller.status()
    assert (status.state, status.revision) == ("stopped", revision + 1), "one sweep, one command"


# -- 6. an inventory sweep over its budget fails; the last lists stay --------------------------


async def test_an_inventory_sweep_over_its_budget_fails_and_peers_keep_the_last_lists(
    server: tuple[int, FakeLmStudio], tmp_path: Path
) -> None:
    port, fake = server
    async with aiohttp.ClientSession() as session:
        world = FakeWorld()
        world.answering.add(port)
        made = rig(_ollama_on(port), session, tmp_path, world=world)
        await made.controller.detect()
        await made.controller.start()
        engines = _component(tmp_path, ollama=made)
        clock = cast(FakeClock, engines._clock)
        assert (await engines.models()).by_engine == {"ollama": ["m"]}
        fake.tags, published = ["m", "new"], len(cast(RecordedEvents, engines._events).events)
        fake.held.clear()  # the engine stops answering in time
        for sweep in (engines.models(), engines._sweep_models(force=True)):
            task = asyncio.ensure_future(sweep)
            await eventually(lambda: any(not wake.done() for _, wake in clock._sleepers))
            await clock.advance(inventory.SWEEP_BUDGET_S)
            with pytest.raises(errors.Unavailable, match="took longer than 10 s"):
                await task
        assert engines.last_models() == {"ollama": (["m"], [])}
        peers = last_engine_models(engines)
        assert (peers["ollama"].models, peers["ollama"].loaded) == (["m"], [])
        events = cast(RecordedEvents, engines._events).events[published:]
        assert not any(isinstance(event, EngineModelsChanged) for event in events)
        fake.held.set()
        await made.controller.shutdown()


def _ollama_on(port: int) -> Manifest:
    return bundled_manifest("ollama", {"runtime": {"port": port}})
