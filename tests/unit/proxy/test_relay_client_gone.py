"""A member's client that hangs up in the middle of a relayed stream is an everyday event on
the serving side: one line in the log saying so, never a traceback.

Node B's relay serves its Ollama emulator over real TLS; node A's client reads the first
records of a stream and closes its connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama_state import OllamaConfig
from tests.unit.proxy.relay_rig import NODE_A, Relay, client_of, serving_relay

# A stream long enough to be cut in the middle: 400 tokens, 5 ms apart.
SLOW = TimingModel(load_delay=0.01, token_delay=0.005)
HEADERS = {"X-PAIR-Job": "node-a/r1/7", "X-PAIR-Attempt": "1", "X-PAIR-Origin": "node-a"}


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    config = OllamaConfig(models=("llama3.2",), timing=SLOW, reply_tokens=400)
    async with serving_relay(config) as served:
        yield served


async def _ended(relay: Relay) -> list[str]:
    for _ in range(500):
        ends = [str(e["kind"]) for e in relay.jobs if e["kind"] in ("completed", "errored")]
        if ends:
            return ends
        await asyncio.sleep(0.01)
    raise AssertionError(f"the job never ended: {relay.jobs}")


async def test_a_client_that_hangs_up_mid_stream_is_one_line_not_a_traceback(
    relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{relay.url}/_pair/relay/ollama/api/chat",
            json=body,
            headers=HEADERS,
            ssl=client_of(NODE_A),
        )
        assert response.status == 200
        assert b'"done":false' in (await response.content.readline()).replace(b" ", b"")
        response.close()  # hangs up: the connection is closed, not returned to the pool
    assert await _ended(relay) == ["errored"]
    await asyncio.sleep(0.3)  # whatever the serving side logs about it
    tracebacks = [r for r in caplog.records if r.exc_info is not None or r.exc_text]
    assert tracebacks == [], [f"{r.name}: {r.getMessage()}" for r in tracebacks]
    said = [r for r in caplog.records if "hung up" in r.getMessage()]
    assert len(said) == 1, [f"{r.name}: {r.levelname} {r.getMessage()}" for r in caplog.records]
