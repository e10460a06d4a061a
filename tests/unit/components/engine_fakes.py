"""Fakes for engine controller tests: a clock the test advances, engine processes that exit
when told, the ports, answers and spawns a controller sees through its drivers (no
subprocesses), launch settings, metadata-only GGUF files, a daemon driven by start and stop
commands and a controller rigged over all of them."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import aiohttp
from msgspec.structs import replace

from backend.components.engines.commands import CommandResult
from backend.components.engines.component import EnginesComponent
from backend.components.engines.controller import EngineController, EngineHooks
from backend.components.engines.launch import LaunchSettings
from backend.components.engines.manifest import (
    Manifest,
    Probe,
    build,
    bundled_documents,
    deep_merge,
    merge_override,
)
from backend.components.engines.process import EngineLog
from backend.components.engines.runner import REAL_DRIVERS, EngineDrivers
from backend.components.engines.shaping import LaunchShaper
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineEvent, EngineModelsChanged, EngineStatus
from tests.fakes import FakeClock, RecordingErrors

T0 = 1000.0
T = TypeVar("T")


def manual_clock() -> FakeClock:
    """The engine tests' clock: it starts at ``T0`` and sleepers wait until the test advances
    it."""
    return FakeClock(T0, on_sleep="wait")


class FakeProcess:
    """An engine process that exits when told; like ``EngineProcess.wait`` it keeps waiting
    for its last output even when cancelled meanwhile."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.create_time = T0
        self.returncode: int | None = None
        self.stopped = False
        self.draining = False
        self._exited = asyncio.Event()
        self._output_done = asyncio.Event()

    def exit(self, code: int, *, output_done: bool = True) -> None:
        self.returncode = code
        self._exited.set()
        if output_done:
            self._output_done.set()

    def finish_output(self) -> None:
        self._output_done.set()

    async def wait(self) -> int:
        await self._exited.wait()
        self.draining = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._output_done.wait()
        assert self.returncode is not None
        return self.returncode

    async def stop(self, *, kill: bool = False, grace: float = 5.0) -> int:
        self.stopped = True
        if self.returncode is None:
            self.exit(-9 if kill else -15)
        self.finish_output()
        return await self.wait()


class FakeWorld:
    """Ports, answers and processes as the controller sees them through its drivers."""

    def __init__(self) -> None:
        self.answering: set[int] = set()  # ports where an engine PAIR did not start answers
        self.listening: set[int] = set()  # ports some other program holds
        self.spawned: list[FakeProcess] = []
        self.argvs: list[list[str]] = []  # what each spawn ran
        # Printed by the next spawned process, which then exits before it is ready.
        self.fail_next: list[str] | None = None
        self.spawning = asyncio.Event()  # cleared by a test to hold spawns back
        self.spawning.set()

    def drivers(self) -> EngineDrivers:
        return EngineDrivers(
            probe_http=self.probe_http,
            port_in_use=self.port_in_use,
            spawn=self.spawn,
            run_command=self.run_command,
        )

    def answers(self, port: int) -> bool:
        alive = any(process.returncode is None for process in self.spawned)
        return port in self.answering or alive

    async def probe_http(
        self, session: aiohttp.ClientSession, host: str, port: int, probe: Probe
    ) -> bool:
        return self.answers(port)

    async def port_in_use(self, host: str, port: int) -> bool:
        return port in self.listening or self.answers(port)

    async def spawn(
        self, argv: Sequence[str], env: dict[str, str], output: EngineLog
    ) -> FakeProcess:
        await self.spawning.wait()
        process = FakeProcess(pid=1000 + len(self.spawned))
        self.spawned.append(process)
        self.argvs.append(list(argv))
        if self.fail_next is not None:
            for line in self.fail_next:
                output.add(line)
            self.fail_next = None
            process.exit(1)
        return process

    async def run_command(
        self, argv: list[str], *, timeout: float, output: EngineLog | None = None
    ) -> CommandResult:
        return CommandResult(argv, 0)


def write_gguf(
    path: Path,
    *,
    architecture: str = "llama",
    context_length: int = 2048,
    pooling: int | None = None,
) -> Path:
    """A metadata-only GGUF file (no tensors): enough for the model store to list it;
    ``pooling``: the ``<arch>.pooling_type`` it declares (an embedding model's)."""
    import gguf

    writer = gguf.GGUFWriter(path, arch=architecture)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_context_length(context_length)
    if pooling is not None:
        writer.add_pooling_type(gguf.PoolingType(pooling))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


class FakeSettings:
    """Launch settings a test changes at will; remembered models are recorded."""

    def __init__(self, parallel: int = 2, context: int = 4096, model: str = "") -> None:
        self.current = LaunchSettings(parallel, context, model)
        self.remembered: list[tuple[str, str]] = []

    def launch(self, engine: EngineName) -> LaunchSettings | None:
        return self.current

    def remember_model(self, engine: EngineName, model: str) -> None:
        self.remembered.append((engine, model))
        self.current = replace(self.current, model=model)


def bundled_manifest(engine: str, change: dict[str, Any] | None = None) -> Manifest:
    """A bundled manifest found at the running Python, without health probes (so only the
    exit watcher observes it), with ``change`` as a user override."""
    override = {"detect": [{"path": sys.executable}], "runtime": {"health": None}}
    document = deep_merge(override, change or {})
    return build(merge_override(bundled_documents()[engine], document, "test"), "test")


@dataclass
class ControllerRig:
    """One controller over a fake world, with what it reported."""

    controller: EngineController
    world: FakeWorld
    clock: FakeClock
    errors: RecordingErrors
    pushed: list[EngineStatus] = field(default_factory=list)


def rig(
    manifest: Manifest,
    session: aiohttp.ClientSession,
    data_dir: Path,
    settings: FakeSettings | None = None,
    world: FakeWorld | None = None,
    shaper: LaunchShaper | None = None,
) -> ControllerRig:
    """A controller for ``manifest`` whose drivers are a fake world."""
    world = world if world is not None else FakeWorld()
    pushed: list[EngineStatus] = []
    recording = RecordingErrors()
    clock = manual_clock()

    async def ignore(*_: object) -> None:
        return None

    controller = EngineController(
        manifest,
        session=session,
        clock=clock,
        hooks=EngineHooks(
            errors=recording,
            on_change=pushed.append,
            save_desired=ignore,
            record_process=ignore,
            forget_process=ignore,
        ),
        install_dir=data_dir / "engines" / manifest.engine,
        drivers=world.drivers(),
        data_dir=data_dir,
        settings=settings,
        shaper=shaper,
    )
    return ControllerRig(controller, world, clock, recording, pushed)


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``predicate`` holds (work in threads, as the model store's, takes real time)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


class FakeDaemonWorld(FakeWorld):
    """A fake world whose start and stop commands drive a daemon (LM Studio's ``lms server``):
    ``server start --port P`` leaves a daemon answering on P (even when the command then
    fails, as a CLI that detached it before failing would), ``server stop`` ends it. The test
    sets the exit codes, whether the stop works, whether the start command can run at all, and
    can hold a start command after it detached its daemon (``start_held``)."""

    def __init__(self) -> None:
        super().__init__()
        self.daemons: set[int] = set()  # ports the daemon answers on
        self.commands: list[list[str]] = []
        self.start_code = 0
        self.start_runs = True  # False: the program cannot be run (nothing starts)
        self.stop_code = 0
        self.stop_works = True
        self.start_held = asyncio.Event()  # cleared by a test to hold start commands
        self.start_held.set()

    def answers(self, port: int) -> bool:
        return port in self.daemons or super().answers(port)

    def stops(self) -> list[list[str]]:
        """The stop commands run so far."""
        return [argv for argv in self.commands if argv[1:3] == ["server", "stop"]]

    async def run_command(
        self, argv: list[str], *, timeout: float, output: EngineLog | None = None
    ) -> CommandResult:
        self.commands.append(list(argv))
        if argv[1:3] == ["server", "start"]:
            if not self.start_runs:
                return CommandResult(argv, 127, [f"cannot run {argv[0]}"], started=False)
            self.daemons.add(int(argv[argv.index("--port") + 1]))
            await self.start_held.wait()
            return CommandResult(argv, self.start_code, ["Starting server..."])
        if argv[1:3] == ["server", "stop"]:
            if self.stop_works:
                self.daemons.clear()
            return CommandResult(argv, self.stop_code, ["The server is not running."])
        return CommandResult(argv, 0)


class RecordedEvents:
    """Stands in for the numbered engine stream: keeps what was published."""

    def __init__(self) -> None:
        self.events: list[EngineEvent] = []

    def publish(self, make_event: Callable[[int], EngineEvent]) -> None:
        """Number and keep one event."""
        self.events.append(make_event(len(self.events) + 1))

    def models(self) -> list[EngineModelsChanged]:
        """The model-list events, in order."""
        return [event for event in self.events if isinstance(event, EngineModelsChanged)]


def engines_over(
    data_dir: Path,
    rigs: dict[str, ControllerRig] | None = None,
    *,
    settings: FakeSettings | None = None,
    ledger: object = None,
    drivers: EngineDrivers = REAL_DRIVERS,
) -> tuple[EnginesComponent, RecordedEvents]:
    """The engines component over rigged controllers (or, without ``rigs``, the ones it builds
    on ``drivers``), on a manual clock, with what it publishes."""
    events = RecordedEvents()
    engines = EnginesComponent(
        data_dir=data_dir,
        ledger=cast(Any, ledger),
        errors_sink=RecordingErrors(),
        clock=manual_clock(),
        events=cast(Any, events),
        settings=settings,
        drivers=drivers,
    )
    if rigs is not None:
        engines.controllers = {name: made.controller for name, made in rigs.items()}
    return engines, events


async def drive(clock: FakeClock, work: Awaitable[T], *, step: float = 0.5) -> T:
    """Await ``work`` while moving ``clock`` on by ``step`` whenever it waits (at most 10 000
    steps), for work that polls on the fake clock."""
    task = asyncio.ensure_future(work)
    for _ in range(10_000):
        if task.done():
            break
        await clock.advance(step)
    return await task
