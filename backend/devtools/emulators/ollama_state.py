"""Configuration and state of one Ollama emulator instance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from backend.core.clock import Clock
from backend.devtools.emulators.catalog import (
    ModelSpec,
    ollama_catalog,
    parse_model_name,
    spec_for,
    weights_for,
)
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama_pull import PullManager
from backend.devtools.emulators.ollama_scheduler import OllamaLimits, OllamaScheduler
from backend.devtools.emulators.scheduling import RequestLog
from backend.devtools.emulators.wire import NANOSECONDS

# What the emulated ollama.com library offers to ``/api/pull`` (any tag of these names).
DEFAULT_LIBRARY: Final = (
    "llama3.2",
    "llama3.1",
    "llama3",
    "qwen2.5",
    "qwen3",
    "gemma3",
    "gemma2",
    "mistral",
    "phi3",
    "phi4",
    "deepseek-r1",
    "tinyllama",
    "smollm2",
    "nomic-embed-text",
    "all-minilm",
    "mxbai-embed-large",
)


class OllamaConfig(msgspec.Struct, frozen=True):
    """How an Ollama emulator behaves: installed models, timing, scheduler limits, pulls.

    ``weights`` maps a model name to its weights blob's digest (``sha256:<hex>``), for a model
    that must be the same weights as a file elsewhere (a llama.cpp GGUF); others get their own.
    """

    models: tuple[str, ...] = ("llama3.2",)
    weights: Mapping[str, str] = msgspec.field(default_factory=dict)
    timing: TimingModel = msgspec.field(default_factory=TimingModel)
    limits: OllamaLimits = msgspec.field(default_factory=OllamaLimits)
    reply_tokens: int | None = None
    pull_seconds: float = 1.0
    library: tuple[str, ...] = DEFAULT_LIBRARY
    version: str = "0.33.0-rc2"
    host_check: bool = True


class OllamaEngine:
    """Everything one emulated Ollama server knows: catalog, scheduler, pulls, request log."""

    def __init__(self, config: OllamaConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.catalog = ollama_catalog(config.models, self.wall_ns(), config.weights)
        self.log = RequestLog(clock)
        self.scheduler = OllamaScheduler(clock=clock, timing=config.timing, limits=config.limits)
        self.pulls = PullManager(
            clock=clock, seconds_per_model=config.pull_seconds, install=self._install
        )

    def wall_ns(self) -> int:
        """Unix time in nanoseconds."""
        return int(self.clock.wall() * NANOSECONDS)

    def find(self, name: str) -> ModelSpec | None:
        """The installed model ``name`` (case-insensitive, ``:latest`` implied)."""
        return self.catalog.find(name)

    def pullable(self, name: str) -> ModelSpec | None:
        """The model a pull of ``name`` installs, or None when the library lacks it."""
        installed = self.catalog.find(name)
        if installed is not None:
            return installed
        parsed = parse_model_name(name)
        known = {entry.lower() for entry in self.config.library}
        if parsed.model.lower() not in known:
            return None
        weights = weights_for(self.config.weights, parsed.display)
        return spec_for(parsed.display, self.wall_ns(), weights)

    def state(self) -> dict[str, Any]:
        """The introspection view (``GET /_emulator/state``)."""
        return {
            "engine": "ollama",
            "loaded": self.scheduler.snapshot(),
            "installed": [spec.name for spec in self.catalog.newest_first()],
            **self.log.snapshot(),
        }

    def _install(self, spec: ModelSpec) -> None:
        if self.catalog.find(spec.name) is None:
            self.catalog.add(spec)
