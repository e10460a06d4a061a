"""The LM Studio emulator's model instances: explicit and JIT loads, TTL, auto-evict, slots.

Each loaded instance has ``parallel`` slots ("Max Concurrent Predictions", default 4); extra
requests queue FIFO without a 503. With JIT on, the first request for a downloaded model loads
it (the load time lands on that request) and, with auto-evict, unloads the previous idle JIT
instance. JIT instances expire after their TTL of idleness; ``lms load`` without ``--ttl`` never.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

import msgspec

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.scheduling import FifoSlots, reap_until_cancelled

DEFAULT_CONTEXT_LENGTH: Final = 4096
JIT_TTL_SECONDS: Final = 60 * 60.0  # LM Studio's default idle TTL for JIT-loaded models


class NotLoaded(Exception):
    """The model is not loaded and JIT loading is off (or it is not downloaded)."""


class LoadSettings(msgspec.Struct, frozen=True):
    """How to load an instance (``lms load`` flags / REST load fields)."""

    context_length: int | None = None
    parallel: int | None = None
    identifier: str | None = None
    ttl_seconds: float | None = None


class Instance(msgspec.Struct):
    """One loaded copy of a model with its own slots."""

    instance_id: str
    spec: ModelSpec
    context_length: int
    slots: FifoSlots
    ttl_seconds: float | None
    jit: bool
    loaded_at: float
    idle_since: float | None
    refs: int = 0

    @property
    def load(self) -> int:
        """Requests running or queued on this instance."""
        return self.slots.busy + self.slots.waiting


class LmStudioScheduler:
    """Owns the loaded instances, JIT load tasks (TaskSet) and the TTL reaper loop."""

    def __init__(
        self, *, clock: Clock, timing: TimingModel, parallel: int, auto_evict: bool
    ) -> None:
        self._clock = clock
        self._timing = timing
        self._parallel = parallel
        self._auto_evict = auto_evict
        self.instances: dict[str, Instance] = {}
        self._jit_loads: dict[str, asyncio.Task[Instance]] = {}
        self._load_lock = asyncio.Lock()
        self._event = asyncio.Event()
        self._tasks = TaskSet("lmstudio-emulator-scheduler")

    async def run(self) -> None:
        """Unload instances idle for longer than their TTL, until cancelled."""
        await reap_until_cancelled(self.reap_expired, lambda: self._event)

    async def stop(self) -> None:
        """Cancel JIT loads in progress; idempotent."""
        await self._tasks.close()

    def reap_expired(self) -> float | None:
        """Unload expired idle instances; seconds until the next expiry, if any."""
        now = self._clock.monotonic()
        next_expiry: float | None = None
        for instance in list(self.instances.values()):
            if instance.refs or instance.idle_since is None or instance.ttl_seconds is None:
                continue
            expiry = instance.idle_since + instance.ttl_seconds
            if expiry <= now:
                self.unload(instance.instance_id)
            elif next_expiry is None or expiry < next_expiry:
                next_expiry = expiry
        return None if next_expiry is None else next_expiry - now

    def find_loaded(self, model: str) -> Instance | None:
        """The instance called ``model``, or the least busy instance of that model key."""
        wanted = model.lower()
        exact = next((i for i in self.instances.values() if i.instance_id.lower() == wanted), None)
        if exact is not None:
            return exact
        matches = [i for i in self.instances.values() if i.spec.name.lower() == wanted]
        return min(matches, key=lambda instance: instance.load) if matches else None

    @contextlib.asynccontextmanager
    async def using(
        self, model: str, spec: ModelSpec | None, *, jit: bool, ttl_seconds: float | None
    ) -> AsyncIterator[Instance]:
        """Hold an instance for ``model`` for the block, JIT-loading ``spec`` if allowed."""
        instance = self.find_loaded(model)
        if instance is None:
            if spec is None or not jit:
                raise NotLoaded(model)
            instance = await self._jit_load(spec, ttl_seconds)
        instance.refs += 1
        instance.idle_since = None
        if ttl_seconds is not None and instance.jit:
            instance.ttl_seconds = ttl_seconds
        try:
            yield instance
        finally:
            instance.refs -= 1
            if instance.refs == 0:
                instance.idle_since = self._clock.monotonic()
            self._notify()

    async def load(self, spec: ModelSpec, settings: LoadSettings, *, jit: bool = False) -> Instance:
        """Load a new instance (a second load of a key makes ``key:2``); waits out the delay."""
        async with self._load_lock:
            if jit and self._auto_evict:
                for other in list(self.instances.values()):
                    if other.jit and other.refs == 0:
                        self.unload(other.instance_id)
            await self._clock.sleep(self._timing.for_model(spec.name).load_delay)
            instance = Instance(
                instance_id=self._free_id(settings.identifier or spec.name),
                spec=spec,
                context_length=settings.context_length or DEFAULT_CONTEXT_LENGTH,
                slots=FifoSlots(
                    settings.parallel or self._timing.slots_for(spec.name, self._parallel)
                ),
                ttl_seconds=settings.ttl_seconds,
                jit=jit,
                loaded_at=self._clock.monotonic(),
                idle_since=self._clock.monotonic(),
            )
            self.instances[instance.instance_id] = instance
            self._notify()
            return instance

    def unload(self, instance_id: str) -> Instance | None:
        """Unload one instance by id; None when there is no such instance."""
        instance = self.instances.pop(instance_id, None)
        if instance is not None:
            self._notify()
        return instance

    def snapshot(self) -> list[dict[str, Any]]:
        """Loaded instances for the introspection endpoint and the fake ``lms ps``."""
        return [
            {
                "identifier": instance.instance_id,
                "model_key": instance.spec.name,
                "context_length": instance.context_length,
                "parallel": instance.slots.capacity,
                "active": instance.slots.busy,
                "queued": instance.slots.waiting,
                "jit": instance.jit,
                "ttl_seconds": instance.ttl_seconds,
            }
            for instance in self.instances.values()
        ]

    async def _jit_load(self, spec: ModelSpec, ttl_seconds: float | None) -> Instance:
        task = self._jit_loads.get(spec.name)
        if task is None:
            settings = LoadSettings(ttl_seconds=ttl_seconds or JIT_TTL_SECONDS)
            task = self._tasks.spawn(self.load(spec, settings, jit=True), name=f"jit {spec.name}")
            self._jit_loads[spec.name] = task
            task.add_done_callback(lambda _: self._jit_loads.pop(spec.name, None))
        return await asyncio.shield(task)

    def _free_id(self, wanted: str) -> str:
        if wanted not in self.instances:
            return wanted
        number = 2
        while f"{wanted}:{number}" in self.instances:
            number += 1
        return f"{wanted}:{number}"

    def _notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()
