"""The Ollama emulator's scheduler: runners, serialized loads, keep_alive expiry, slots.

Modelled on Ollama's ``server/sched.go``: a request for a loaded runner skips the pending queue;
one that needs a load waits in a bounded queue (overflow -> 503) and loads run one at a time,
evicting the least recently used idle runner when ``max_loaded`` is reached. Each runner has
``parallel`` slots; extra requests wait FIFO without bound. An idle runner expires after its
keep_alive (``0`` unloads right away, negative never).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import msgspec

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.scheduling import FifoSlots, reap_until_cancelled
from backend.devtools.emulators.wire import NANOSECONDS, far_future_ns

MAX_QUEUE_MESSAGE: Final = "server busy, please try again.  maximum pending requests exceeded"


class ServerBusy(Exception):
    """The pending-load queue is full (Ollama's ``ErrMaxQueue``, HTTP 503)."""


class OllamaLimits(msgspec.Struct, frozen=True):
    """Ollama's scheduler settings (``OLLAMA_NUM_PARALLEL``, ``..._MAX_LOADED_MODELS`` ...)."""

    parallel: int = 1
    max_loaded: int = 3
    max_queue: int = 512
    keep_alive_ns: int = 5 * 60 * NANOSECONDS
    num_ctx: int = 4096


class Runner(msgspec.Struct):
    """A loaded model: its slots, the requests holding it and when it expires when idle."""

    spec: ModelSpec
    context_length: int
    slots: FifoSlots
    session_ns: int
    loaded_at: float
    refs: int = 0
    expires_at_ns: int | None = None
    last_used: float = 0.0

    @property
    def idle(self) -> bool:
        """No request holds the runner."""
        return self.refs == 0


class OllamaScheduler:
    """Owns the loaded runners, the load tasks (TaskSet) and the keep_alive reaper loop."""

    def __init__(self, *, clock: Clock, timing: TimingModel, limits: OllamaLimits) -> None:
        self._clock = clock
        self._timing = timing
        self._limits = limits
        self.runners: dict[str, Runner] = {}
        self._loading: dict[str, asyncio.Task[Runner]] = {}
        self._load_lock = asyncio.Lock()
        self._pending = 0
        self._event = asyncio.Event()
        self._tasks = TaskSet("ollama-emulator-scheduler")

    async def run(self) -> None:
        """Unload runners whose keep_alive ran out, until cancelled."""
        await reap_until_cancelled(self.reap_expired, lambda: self._event)

    async def stop(self) -> None:
        """Cancel loads in progress; idempotent."""
        await self._tasks.close()

    def reap_expired(self) -> float | None:
        """Unload expired idle runners; seconds until the next expiry, if any."""
        now = self._wall_ns()
        next_expiry: int | None = None
        for name, runner in list(self.runners.items()):
            if not runner.idle or runner.expires_at_ns is None:
                continue
            if runner.expires_at_ns <= now:
                self._unload(name)
            elif next_expiry is None or runner.expires_at_ns < next_expiry:
                next_expiry = runner.expires_at_ns
        return None if next_expiry is None else (next_expiry - now) / NANOSECONDS

    @contextlib.asynccontextmanager
    async def using(
        self, spec: ModelSpec, num_ctx: int | None, keep_alive_ns: int | None
    ) -> AsyncIterator[Runner]:
        """Hold the runner for ``spec`` (loading it first if needed) for the block."""
        runner = await self.schedule(spec, num_ctx, keep_alive_ns)
        try:
            yield runner
        finally:
            self.release(runner)

    async def schedule(
        self, spec: ModelSpec, num_ctx: int | None, keep_alive_ns: int | None
    ) -> Runner:
        """The runner for ``spec`` with ``num_ctx``, loaded if needed; the caller holds a ref."""
        context_length = num_ctx or self._limits.num_ctx
        while True:
            runner = self.runners.get(spec.name)
            if runner is not None and runner.context_length == context_length:
                self._take(runner, keep_alive_ns)
                return runner
            await self._wait_for_load(spec, context_length)

    def release(self, runner: Runner) -> None:
        """A request is done with ``runner``; when it goes idle its keep_alive starts."""
        runner.refs -= 1
        runner.last_used = self._clock.monotonic()
        if runner.refs == 0:
            if runner.session_ns == 0:
                self._unload(runner.spec.name)
            else:
                runner.expires_at_ns = far_future_ns(self._wall_ns(), runner.session_ns)
        self._notify()

    def expire(self, name: str) -> None:
        """``keep_alive: 0`` with no prompt: unload now, or as soon as the runner goes idle."""
        runner = self.runners.get(name)
        if runner is None:
            return
        runner.session_ns = 0
        if runner.idle:
            self._unload(name)

    def expires_at_ns(self, runner: Runner) -> int:
        """What ``/api/ps`` shows: the expiry, or now + keep_alive while busy."""
        if runner.expires_at_ns is not None:
            return runner.expires_at_ns
        return far_future_ns(self._wall_ns(), runner.session_ns)

    def snapshot(self) -> list[dict[str, Any]]:
        """Loaded runners for the introspection endpoint."""
        return [
            {
                "name": runner.spec.name,
                "context_length": runner.context_length,
                "parallel": runner.slots.capacity,
                "active": runner.slots.busy,
                "queued": runner.slots.waiting,
                "refs": runner.refs,
                "expires_at_ns": self.expires_at_ns(runner),
            }
            for runner in self.runners.values()
        ]

    async def _wait_for_load(self, spec: ModelSpec, context_length: int) -> None:
        if self._pending >= self._limits.max_queue:
            raise ServerBusy(MAX_QUEUE_MESSAGE)
        self._pending += 1
        try:
            task = self._loading.get(spec.name)
            if task is None:
                task = self._tasks.spawn(self._load(spec, context_length), name=spec.name)
                self._loading[spec.name] = task
                task.add_done_callback(lambda _: self._loading.pop(spec.name, None))
            # A load in progress goes on even if this request is cancelled meanwhile.
            await asyncio.shield(task)
        finally:
            self._pending -= 1

    async def _load(self, spec: ModelSpec, context_length: int) -> Runner:
        async with self._load_lock:
            existing = self.runners.get(spec.name)
            if existing is not None and existing.context_length == context_length:
                return existing
            if existing is not None:  # a different num_ctx needs a reload
                await self._wait_until(lambda: existing.idle)
                self._unload(spec.name)
            await self._make_room()
            await self._clock.sleep(self._timing.for_model(spec.name).load_delay)
            runner = Runner(
                spec=spec,
                context_length=context_length,
                slots=FifoSlots(self._timing.slots_for(spec.name, self._limits.parallel)),
                session_ns=self._limits.keep_alive_ns,
                loaded_at=self._clock.monotonic(),
                last_used=self._clock.monotonic(),
            )
            runner.expires_at_ns = far_future_ns(self._wall_ns(), runner.session_ns)
            self.runners[spec.name] = runner
            self._notify()
            return runner

    async def _make_room(self) -> None:
        while len(self.runners) >= self._limits.max_loaded:
            idle = [runner for runner in self.runners.values() if runner.idle]
            if idle:
                victim = min(idle, key=lambda runner: runner.last_used)
                self._unload(victim.spec.name)
            else:
                await self._wait_until(lambda: any(runner.idle for runner in self.runners.values()))

    def _take(self, runner: Runner, keep_alive_ns: int | None) -> None:
        runner.refs += 1
        runner.session_ns = self._limits.keep_alive_ns if keep_alive_ns is None else keep_alive_ns
        runner.expires_at_ns = None
        runner.last_used = self._clock.monotonic()

    def _unload(self, name: str) -> None:
        if self.runners.pop(name, None) is not None:
            self._notify()

    async def _wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._event.wait()

    def _notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def _wall_ns(self) -> int:
        return int(self._clock.wall() * NANOSECONDS)
