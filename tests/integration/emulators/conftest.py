"""The Ollama and LM Studio emulators (standing in for the real engines), served in-process on
free ports, one fresh emulator per test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.lmstudio import build_lmstudio_app
from backend.devtools.emulators.lmstudio_http import ENGINE as LMSTUDIO_ENGINE
from backend.devtools.emulators.lmstudio_state import LmStudioConfig, LmStudioEngine
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_http import ENGINE as OLLAMA_ENGINE
from backend.devtools.emulators.ollama_scheduler import OllamaLimits
from backend.devtools.emulators.ollama_state import OllamaConfig, OllamaEngine
from backend.devtools.emulators.server import EmulatorServer

FAST = TimingModel(load_delay=0.01, token_delay=0.002)


@dataclass
class Emulator:
    """A running emulator: its base URL and its state object (for white-box checks)."""

    url: str
    engine: Any

    async def state(self) -> dict[str, Any]:
        """``GET /_emulator/state``."""
        async with httpx.AsyncClient(base_url=self.url) as client:
            response = await client.get("/_emulator/state")
            response.raise_for_status()
            return response.json()  # type: ignore[no-any-return]

    async def wait_state(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        """Poll the introspection endpoint until ``predicate`` holds."""
        async with asyncio.timeout(timeout):
            while True:
                state = await self.state()
                if predicate(state):
                    return state
                await asyncio.sleep(0.02)


StartOllama = Callable[..., Awaitable[Emulator]]
StartLmStudio = Callable[..., Awaitable[Emulator]]


@pytest.fixture
async def start_ollama() -> AsyncIterator[StartOllama]:
    """Start Ollama emulators (defaults: llama3.2 and nomic-embed-text, fast timing)."""
    servers: list[EmulatorServer] = []

    async def start(
        models: tuple[str, ...] = ("llama3.2", "nomic-embed-text"),
        timing: TimingModel = FAST,
        parallel: int = 1,
        **config: Any,
    ) -> Emulator:
        limits = config.pop("limits", OllamaLimits(parallel=parallel))
        app = build_ollama_app(OllamaConfig(models=models, timing=timing, limits=limits, **config))
        server = EmulatorServer(app)
        servers.append(server)
        await server.start()
        engine: OllamaEngine = app[OLLAMA_ENGINE]
        return Emulator(server.url, engine)

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def ollama_emulator(start_ollama: StartOllama) -> Emulator:
    """One Ollama emulator with the defaults."""
    return await start_ollama()


@pytest.fixture
async def start_lmstudio() -> AsyncIterator[StartLmStudio]:
    """Start LM Studio emulators (defaults: a chat and an embedding model, fast timing)."""
    servers: list[EmulatorServer] = []

    async def start(
        models: tuple[str, ...] = ("qwen2.5-7b-instruct", "text-embedding-nomic-embed-text-v1.5"),
        timing: TimingModel = FAST,
        **config: Any,
    ) -> Emulator:
        app = build_lmstudio_app(LmStudioConfig(models=models, timing=timing, **config))
        server = EmulatorServer(app)
        servers.append(server)
        await server.start()
        engine: LmStudioEngine = app[LMSTUDIO_ENGINE]
        return Emulator(server.url, engine)

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def lmstudio_emulator(start_lmstudio: StartLmStudio) -> Emulator:
    """One LM Studio emulator with the defaults."""
    return await start_lmstudio()
