"""``/api/pull`` for the Ollama emulator: shared, resumable downloads with per-layer progress.

Like Ollama's ``server/download.go``: concurrent pulls of one model share one download, the
download stops when its last waiter leaves and a later pull resumes from the partial blobs.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Final

import msgspec

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.devtools.emulators.catalog import ModelSpec

MANIFEST_MISSING: Final = "pull model manifest: file does not exist"
_TICK: Final = 0.06  # Ollama reports progress about every 60 ms
# The small blobs next to the weights in an Ollama manifest: template, license, params, config.
_SMALL_LAYERS: Final = (("template", 1_429), ("license", 12_403), ("params", 96), ("config", 487))


class PullError(Exception):
    """A pull that cannot happen; ``str()`` is Ollama's message."""


class Layer(msgspec.Struct, frozen=True):
    """One blob of a model: its digest (hex, no prefix) and size."""

    digest: str
    total: int


def layers_for(spec: ModelSpec) -> list[Layer]:
    """The blobs a pull of ``spec`` downloads, weights first."""
    small = [
        Layer(hashlib.sha256(f"{spec.name}/{kind}".encode()).hexdigest(), size)
        for kind, size in _SMALL_LAYERS
    ]
    weights = spec.size - sum(layer.total for layer in small)
    return [Layer(spec.weights_digest, max(weights, 1)), *small]


def progress_line(layer: Layer, completed: int) -> dict[str, Any]:
    """One progress object; ``completed`` is omitted while zero (Go ``omitempty``)."""
    line: dict[str, Any] = {
        "status": f"pulling {layer.digest[:12]}",
        "digest": f"sha256:{layer.digest}",
        "total": layer.total,
    }
    if completed:
        line["completed"] = completed
    return line


class Download(msgspec.Struct):
    """One model's download, shared by every pull waiting on it."""

    spec: ModelSpec
    layers: list[Layer]
    completed: dict[str, int]
    waiters: int = 0
    finished: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    changed: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def notify(self) -> None:
        """Wake every waiter (a new event for the next change)."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()


class PullManager:
    """Owns the running download tasks and the partial blobs they leave behind."""

    def __init__(
        self,
        *,
        clock: Clock,
        seconds_per_model: float,
        install: Callable[[ModelSpec], None],
    ) -> None:
        self._clock = clock
        self._seconds = seconds_per_model
        self._install = install
        self._downloads: dict[str, Download] = {}
        self._partial: dict[str, int] = {}
        self._tasks = TaskSet("ollama-emulator-pulls")

    async def stop(self) -> None:
        """Cancel running downloads; idempotent."""
        await self._tasks.close()

    async def progress(
        self, spec: ModelSpec, installed: bool
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Progress objects of a pull (after ``pulling manifest``), ending at ``success``."""
        download = self._join(spec, installed)
        download.waiters += 1
        try:
            for layer in download.layers:
                async for line in self._layer_progress(download, layer):
                    yield line
            await download.finished.wait()
            for status in ("verifying sha256 digest", "writing manifest", "success"):
                yield {"status": status}
        finally:
            download.waiters -= 1
            if download.waiters == 0 and download.task is not None:
                download.task.cancel()  # the last waiter left: stop, keep the partial blobs

    async def _layer_progress(
        self, download: Download, layer: Layer
    ) -> AsyncIterator[dict[str, Any]]:
        last = -1
        while True:
            changed = download.changed
            completed = download.completed[layer.digest]
            if completed != last:
                last = completed
                yield progress_line(layer, completed)
            if completed >= layer.total:
                return
            await changed.wait()

    def _join(self, spec: ModelSpec, installed: bool) -> Download:
        existing = self._downloads.get(spec.name)
        if existing is not None:
            return existing
        layers = layers_for(spec)
        completed = {
            layer.digest: layer.total if installed else self._partial.get(layer.digest, 0)
            for layer in layers
        }
        download = Download(spec, layers, completed)
        self._downloads[spec.name] = download
        download.task = self._tasks.spawn(self._run(download), name=f"pull {spec.name}")
        return download

    async def _run(self, download: Download) -> None:
        try:
            for layer in download.layers:
                await self._fetch(download, layer)
            self._install(download.spec)
            download.finished.set()
        finally:
            for layer in download.layers:
                self._partial[layer.digest] = download.completed[layer.digest]
            self._downloads.pop(download.spec.name, None)
            download.notify()

    async def _fetch(self, download: Download, layer: Layer) -> None:
        tick = min(_TICK, self._seconds) if self._seconds > 0 else 0.0
        steps = max(1, math.ceil(self._seconds / tick)) if tick else 1
        if layer.total < 1_000_000:
            steps = 1  # small blobs arrive in one go
        step = math.ceil(layer.total / steps)
        while download.completed[layer.digest] < layer.total:
            await self._clock.sleep(tick)
            download.completed[layer.digest] = min(
                layer.total, download.completed[layer.digest] + step
            )
            download.notify()
