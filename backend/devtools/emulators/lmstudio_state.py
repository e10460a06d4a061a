"""Configuration and state of one LM Studio emulator instance, including model downloads."""

from __future__ import annotations

import math
import secrets
from typing import Any, Literal

import msgspec

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.devtools.emulators.catalog import ModelSpec, lmstudio_catalog, spec_for
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.lmstudio_scheduler import LmStudioScheduler
from backend.devtools.emulators.scheduling import RequestLog
from backend.devtools.emulators.wire import iso_millis

DownloadStatus = Literal["downloading", "paused", "completed", "failed"]


class LmStudioConfig(msgspec.Struct, frozen=True):
    """How an LM Studio emulator behaves: downloaded models, timing, parallel, JIT."""

    models: tuple[str, ...] = ("qwen2.5-7b-instruct",)
    timing: TimingModel = msgspec.field(default_factory=TimingModel)
    parallel: int = 4
    reply_tokens: int | None = None
    jit: bool = True
    auto_evict: bool = True
    download_seconds: float = 1.0
    finish_prompt_on_cancel: bool = True


class DownloadJob(msgspec.Struct):
    """One ``/api/v1/models/download`` job, advanced by a background task."""

    job_id: str
    spec: ModelSpec
    started_at: float
    status: DownloadStatus = "downloading"
    downloaded_bytes: int = 0
    completed_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The job status object of LM Studio's REST API."""
        value: dict[str, Any] = {"job_id": self.job_id, "status": self.status}
        if self.status == "downloading":
            value["bytes_per_second"] = float(self.spec.size)
        if self.completed_at is not None:
            value["completed_at"] = iso_millis(self.completed_at)
        value["total_size_bytes"] = self.spec.size
        value["downloaded_bytes"] = self.downloaded_bytes
        value["started_at"] = iso_millis(self.started_at)
        return value


class LmStudioEngine:
    """Everything one emulated LM Studio server knows: catalog, instances, downloads, log."""

    def __init__(self, config: LmStudioConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.catalog = lmstudio_catalog(config.models, int(clock.wall() * 1e9))
        self.log = RequestLog(clock)
        self.scheduler = LmStudioScheduler(
            clock=clock,
            timing=config.timing,
            parallel=config.parallel,
            auto_evict=config.auto_evict,
        )
        self.downloads: dict[str, DownloadJob] = {}
        self._tasks = TaskSet("lmstudio-emulator-downloads")

    async def stop(self) -> None:
        """Cancel running downloads; idempotent."""
        await self._tasks.close()

    def start_download(self, model: str) -> DownloadJob:
        """Start downloading ``model`` in the background."""
        spec = spec_for(model, int(self.clock.wall() * 1e9))
        job = DownloadJob(f"job_{secrets.token_hex(5)}", spec, self.clock.wall())
        self.downloads[job.job_id] = job
        self._tasks.spawn(self._download(job), name=f"download {model}")
        return job

    async def _download(self, job: DownloadJob) -> None:
        steps = max(1, math.ceil(self.config.download_seconds / 0.1))
        for step in range(1, steps + 1):
            await self.clock.sleep(self.config.download_seconds / steps)
            job.downloaded_bytes = min(job.spec.size, math.ceil(job.spec.size * step / steps))
        job.status = "completed"
        job.completed_at = self.clock.wall()
        if self.catalog.find(job.spec.name) is None:
            self.catalog.add(job.spec)

    def state(self) -> dict[str, Any]:
        """The introspection view (``GET /_emulator/state``)."""
        return {
            "engine": "lmstudio",
            "loaded": self.scheduler.snapshot(),
            "installed": [spec.name for spec in self.catalog],
            **self.log.snapshot(),
        }
