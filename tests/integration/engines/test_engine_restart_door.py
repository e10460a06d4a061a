"""While PAIR brings this computer's engine back after a crash, a request for one of its models
is told to try again shortly (503 + Retry-After), never "not found" (404), which a client takes
as final; once the engine is back, the model is served again. A deliberate stop is different:
its models are simply not here any more.

The door has a second target (a bare Ollama emulator added by address, with other models), as
on any node with peers: with no target at all the door would answer 503 "no engine" anyway.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from tests.integration.conftest import Broker, Client
from tests.integration.discovery.test_manual_nodes import (  # noqa: F401  (fixtures)
    by_id,
    fast,
    no_mdns,
    ollama_emulator,
    wait_nodes,
)
from tests.support.ports import free_port

StartBroker = Callable[..., Broker]
MODEL = "tinyllama:latest"  # the local engine's (the bare emulator serves other models)


async def _answer(http: aiohttp.ClientSession, url: str) -> tuple[int, str | None, str]:
    # Two tokens: the requests that reached the door while the crash was not yet noticed wait
    # for the engine (it has one slot) and are all served once it is back; with a whole reply
    # each, that queue took minutes on a loaded machine.
    body = {"model": MODEL, "prompt": "hi", "stream": False, "options": {"num_predict": 2}}
    async with http.post(url, json=body) as response:
        return response.status, response.headers.get("Retry-After"), await response.text()


async def _served(http: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (answer := await _answer(http, url))[0] != 200:
        assert time.monotonic() < deadline, f"the model was not served: {answer}"
        await asyncio.sleep(0.1)


async def _with_second_target(client: Client, port: int) -> None:
    added = await client.call("node/add", {"address": "127.0.0.1", "port": port})
    await wait_nodes(client, lambda nodes: (by_id(nodes, added["id"]) or {}).get("reachable"))


async def test_a_crashed_engines_models_are_503_not_404_until_it_is_back(
    no_mdns: None,  # noqa: F811
    start_broker: StartBroker,
    ollama_node: tuple[Path, int],
    ollama_emulator: int,  # noqa: F811
) -> None:
    data_dir, _ = ollama_node
    door = free_port()
    broker = start_broker("--ollama-port", str(door), data_dir=data_dir)
    url = f"http://127.0.0.1:{door}/api/generate"
    async with broker.connect() as client, aiohttp.ClientSession() as http:
        await _with_second_target(client, ollama_emulator)
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
        await _served(http, url)
        os.kill(pid, signal.SIGKILL)
        # A request every 50 ms, each on its own, from the kill until the engine is back.
        asked: list[asyncio.Task[tuple[int, str | None, str]]] = []
        deadline = time.monotonic() + 30
        while (await client.call("engine:status", {"engine": "ollama"}))["pid"] in (None, pid):
            assert time.monotonic() < deadline, "the engine was not restarted within 30 s"
            asked.append(asyncio.create_task(_answer(http, url)))
            await asyncio.sleep(0.05)
        await _served(http, url)
        answers = await asyncio.gather(*asked)
        assert not [a for a in answers if a[0] == 404], "a model coming back is not 'not found'"
        away = [a for a in answers if a[0] == 503 and "restarting" in a[2]]
        assert away, f"the engine was away and said so: {sorted({a[0] for a in answers})}"
        assert all(retry == "5" for _, retry, _ in away)
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)
        deadline = time.monotonic() + 10
        while (answer := await _answer(http, url))[0] != 404:
            assert time.monotonic() < deadline, f"a stopped engine's model is not found: {answer}"
            await asyncio.sleep(0.1)
        assert "not found" in answer[2]
