"""While PAIR brings this computer's engine back after a crash, every request that names one
of its models is told to try again shortly (503 + Retry-After), not "not found" (404): the
model's details (``/api/show``) and token counts as well as inference."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.integration.conftest import Broker
from tests.integration.engines.test_engine_restart_door import MODEL
from tests.support.ports import free_port

StartBroker = Callable[..., Broker]
# The shim waits this long before the emulator starts: a restart with a window to ask in.
START_DELAY_S = "1.5"


async def _show(http: aiohttp.ClientSession, door: str) -> tuple[int, str | None]:
    async with http.post(f"{door}/api/show", json={"model": MODEL}) as response:
        await response.read()
        return response.status, response.headers.get("Retry-After")


async def test_a_crashed_engines_model_details_are_503_not_404_until_it_is_back(
    start_broker: StartBroker,
    ollama_node: tuple[Path, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data_dir, _ = ollama_node
    monkeypatch.setenv("PAIR_TEST_START_DELAY", START_DELAY_S)
    door_port = free_port()
    broker = start_broker("--ollama-port", str(door_port), data_dir=data_dir)
    door = f"http://127.0.0.1:{door_port}"
    async with broker.connect() as client, aiohttp.ClientSession() as http:
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
        async with asyncio.timeout(30):
            while (await _show(http, door))[0] != 200:
                await asyncio.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        answers: list[tuple[int, str | None]] = []
        deadline = time.monotonic() + 30
        while (await client.call("engine:status", {"engine": "ollama"}))["pid"] in (None, pid):
            assert time.monotonic() < deadline, "the engine was not restarted within 30 s"
            answers.append(await _show(http, door))
            await asyncio.sleep(0.05)
    statuses = sorted({status for status, _ in answers})
    assert 404 not in statuses, f"a model coming back is not 'not found': {statuses}"
    away = [retry for status, retry in answers if status == 503]
    assert away and all(retry == "5" for retry in away), answers
