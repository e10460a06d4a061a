"""Where requests cannot be kept with the broker (Windows: no descriptor passing, so
``channel_pair()`` gives nothing), the proxy runs without custody and a worker crash degrades
cleanly: the worker starts with no custody channel, a request waiting in it when it is killed
ends at once with a cut connection instead of hanging, and the restarted worker serves."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import aiohttp
import psutil
import pytest

from backend.components.proxy import custody
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from tests.integration.proxy.conftest import StartProxy, local

MODEL = "llama3.2"
WAITING = 3
# A request that has not ended this long after the kill is hung.
HANG_S = 30.0


@pytest.fixture
async def slow_ollama() -> AsyncIterator[str]:
    """An Ollama emulator whose answers take about two seconds (one at a time)."""
    timing = TimingModel(load_delay=0.0, token_delay=0.1)
    server = EmulatorServer(build_ollama_app(OllamaConfig(models=(MODEL,), timing=timing)))
    await server.start()
    yield server.url
    await server.stop()


async def _ask(session: aiohttp.ClientSession, url: str) -> str:
    body = {"model": MODEL, "prompt": "hello", "stream": False, "options": {"num_predict": 20}}
    try:
        async with session.post(f"{url}/api/generate", json=body) as response:
            await response.read()
            return f"status {response.status}"
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        return f"cut: {type(exc).__name__}"


async def test_without_custody_a_killed_worker_cuts_its_waiting_requests_and_the_next_serves(
    start_proxy: StartProxy, slow_ollama: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(custody, "channel_pair", lambda: None)
    proxy = await start_proxy(ollama=local(slow_ollama, [MODEL], slots=1))
    pid = await proxy.wait_serving()
    assert not any(arg.startswith("--custody") for arg in psutil.Process(pid).cmdline())
    url = proxy.url("ollama")
    async with aiohttp.ClientSession() as session:
        asks = [asyncio.create_task(_ask(session, url)) for _ in range(1 + WAITING)]
        async with asyncio.timeout(10):
            while len(proxy.keys()) < 1 + WAITING:  # every request reached the worker
                await asyncio.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(HANG_S):
            outcomes = await asyncio.gather(*asks)
        assert all(outcome.startswith("cut") for outcome in outcomes), outcomes
        async with asyncio.timeout(30):  # the supervisor notices the death, then restarts
            while await proxy.wait_serving(timeout=30) == pid:
                await asyncio.sleep(0.02)
        assert await _ask(session, url) == "status 200"
