"""The telemetry sampler: CPU, memory and GPU readings every ~2 s, taken in a worker thread."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

from backend.components.nodeinfo.gpus import DRM_ROOT, NvidiaReader, read_amd_gpus
from backend.components.nodeinfo.host import HostReader, cpu_name
from backend.core.clock import Clock
from backend.core.component import Component
from backend.protocol.types.nodes import NodeCpu, NodeGpu, NodeMemory

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
# Consumers poll every ~2 s; a sample older than three intervals means the sampler is stuck.
STALE_AFTER_S = 3 * SAMPLE_INTERVAL_S
CLOSE_TIMEOUT_S = 2.0


class Sample(msgspec.Struct, frozen=True):
    """One round of readings and the monotonic time it was taken."""

    cpu: NodeCpu
    memory: NodeMemory
    gpus: list[NodeGpu]
    taken_at: float


class TelemetryView(msgspec.Struct, frozen=True):
    """The latest sample as consumers see it: validity and age decided at read time."""

    cpu: NodeCpu = msgspec.field(default_factory=NodeCpu)
    memory: NodeMemory = msgspec.field(default_factory=NodeMemory)
    gpus: list[NodeGpu] = msgspec.field(default_factory=list)
    valid: bool = False
    age_ms: int | None = None


class Collector:
    """Takes one sample; owns the NVML session and the previous CPU times (blocking calls)."""

    def __init__(
        self,
        *,
        host: HostReader | None = None,
        nvidia: NvidiaReader | None = None,
        drm_root: Path = DRM_ROOT,
    ) -> None:
        self._host = host or HostReader()
        self._nvidia = nvidia or NvidiaReader()
        self._drm_root = drm_root
        self._opened = False
        # A cancelled sample keeps running in its thread; close() must not pull NVML from under it.
        self._lock = threading.Lock()

    def _open(self) -> None:
        # What never changes is read once; NVML is started once per collector.
        if self._host.name is None:
            self._host.name = cpu_name()
        self._nvidia.start()
        self._opened = True

    def sample(self, taken_at: float) -> Sample:
        """One round of readings stamped ``taken_at``."""
        with self._lock:
            if not self._opened:
                self._open()
            gpus = self._nvidia.read() + read_amd_gpus(self._drm_root)
            return Sample(self._host.cpu(), self._host.memory(), gpus, taken_at)

    def close(self) -> None:
        """Release NVML; idempotent."""
        with self._lock:
            self._nvidia.close()
            self._opened = False


class TelemetryComponent(Component):
    """Owns the sampling loop and its collector; the readings themselves run in a thread."""

    ready_on_start = False

    def __init__(
        self,
        *,
        clock: Clock,
        make_collector: Callable[[], Collector] = Collector,
        interval: float = SAMPLE_INTERVAL_S,
    ) -> None:
        super().__init__("nodeinfo")
        self._clock = clock
        self._make_collector = make_collector
        self._interval = interval
        self._latest: Sample | None = None
        self._run_task: asyncio.Task[object] | None = None

    async def run(self) -> None:
        """Sample every ``interval`` seconds until cancelled; ready after the first sample."""
        self._run_task = asyncio.current_task()
        collector = self._make_collector()
        try:
            await self._sample(collector)
            self.announce_ready()
            while True:
                await self._clock.sleep(self._interval)
                await self._sample(collector)
        finally:
            await asyncio.shield(self._close(collector))

    async def stop(self) -> None:
        """End the loop now: between samples there is nothing to finish, so cancel the run."""
        task = self._run_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def view(self) -> TelemetryView:
        """The latest readings, whether they are fresh, and how old they are."""
        sample = self._latest
        if sample is None:
            return TelemetryView()
        age = max(0.0, self._clock.monotonic() - sample.taken_at)
        return TelemetryView(
            cpu=sample.cpu,
            memory=sample.memory,
            gpus=sample.gpus,
            valid=age <= STALE_AFTER_S,
            age_ms=int(age * 1000),
        )

    async def _sample(self, collector: Collector) -> None:
        # NVML and /proc reads can block, so they never run on the event loop.
        try:
            self._latest = await asyncio.to_thread(collector.sample, self._clock.monotonic())
        except Exception:
            log.exception("telemetry sample failed; keeping the previous one")

    async def _close(self, collector: Collector) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.to_thread(collector.close)
        except TimeoutError:
            log.warning("NVML did not shut down within %.1f s", CLOSE_TIMEOUT_S)
