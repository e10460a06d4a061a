"""engine-apis.md §6 through the Ollama front door: ``/api/generate`` and ``/api/chat``, their
streaming, load and unload requests, and cancellation (the rest is in
``test_conformance_ollama.py``).

The Ollama emulator stands behind the door (one proxy and one emulator per module, so the
suite stays fast); each test is named after its checklist number.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.integration.proxy.conformance import (
    BODIES,
    METRICS,
    PROMPT,
    REPLY_TOKENS,
    SLOW_TOKEN_DELAY,
    OllamaDoor,
    both_endpoints,
    fast_ollama_behind_door,
    loaded_names,
    ndjson,
    rfc3339,
    slow_ollama_behind_door,
    unload,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def door() -> AsyncIterator[OllamaDoor]:
    """A fast emulator (a few ms per reply) behind the door; 0.25 s per pull."""
    async with fast_ollama_behind_door() as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_door() -> AsyncIterator[OllamaDoor]:
    """An emulator writing one token per ``SLOW_TOKEN_DELAY`` (400 tokens unless capped)."""
    async with slow_ollama_behind_door() as running:
        yield running


# /api/generate and /api/chat, streaming


@both_endpoints
async def test_c17_streaming_is_the_default(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, json=BODIES[path])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"


@both_endpoints
async def test_c18_every_ndjson_line_is_one_object(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, json=BODIES[path])
    assert len(ndjson(response.content)) == REPLY_TOKENS + 1


@both_endpoints
@pytest.mark.parametrize("model", ["llama3.2", "LLAMA3.2:latest"])
async def test_c19_every_chunk_echoes_model_and_has_created_at_and_done(
    door: OllamaDoor, path: str, model: str
) -> None:
    async with door.client() as client:
        response = await client.post(path, json={**BODIES[path], "model": model})
    for chunk in ndjson(response.content):
        assert chunk["model"] == model, "the request's spelling, verbatim"
        assert rfc3339(chunk["created_at"]).utcoffset() is not None
        assert isinstance(chunk["done"], bool)


@both_endpoints
async def test_c20_non_final_chunks_carry_text(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, json=BODIES[path])
    for chunk in ndjson(response.content)[:-1]:
        assert chunk["done"] is False
        if path == "/api/generate":
            assert isinstance(chunk["response"], str)
        else:
            assert chunk["message"]["role"] == "assistant"
            assert isinstance(chunk["message"]["content"], str)


@both_endpoints
async def test_c21_exactly_one_done_chunk_and_it_is_last(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, json=BODIES[path])
    chunks = ndjson(response.content)
    assert [chunk["done"] for chunk in chunks] == [False] * (len(chunks) - 1) + [True]


@both_endpoints
async def test_c22_final_chunk_has_done_reason_and_integer_metrics(
    door: OllamaDoor, path: str
) -> None:
    async with door.client() as client:
        response = await client.post(path, json=BODIES[path])
    chunks = ndjson(response.content)
    final = chunks[-1]
    assert final["done_reason"] in ("stop", "length")
    for metric in METRICS:
        assert type(final[metric]) is int and final[metric] >= 0, metric
    assert not any(metric in chunk for chunk in chunks[:-1] for metric in METRICS)


@both_endpoints
async def test_c23_streamed_text_equals_the_non_streamed_text(door: OllamaDoor, path: str) -> None:
    body = {**BODIES[path], "options": {"seed": 42, "temperature": 0}}
    async with door.client() as client:
        streamed = ndjson((await client.post(path, json=body)).content)
        whole = (await client.post(path, json={**body, "stream": False})).json()

    def text(chunk: dict[str, Any]) -> str:
        return str(chunk["response"] if path == "/api/generate" else chunk["message"]["content"])

    assert "".join(text(chunk) for chunk in streamed) == text(whole) != ""


async def test_c24_first_chunk_arrives_long_before_generation_finishes(
    slow_door: OllamaDoor,
) -> None:
    tokens = 8
    body = {**PROMPT, "options": {"num_predict": tokens}}
    arrivals: list[float] = []
    async with (
        slow_door.client() as client,
        client.stream("POST", "/api/generate", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line:
                arrivals.append(time.perf_counter())
    assert len(arrivals) == tokens + 1
    # The emulator spends (tokens - 1) token delays between the first and the last token; a
    # proxy that buffered the body would deliver every line at once.
    assert arrivals[-1] - arrivals[0] >= (tokens - 1) * SLOW_TOKEN_DELAY / 2


@both_endpoints
async def test_c25_stream_false_answers_one_json_object(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, json={**BODIES[path], "stream": False})
    assert response.headers["content-type"].startswith("application/json")
    assert response.content.strip().count(b"\n") == 0
    whole = response.json()
    assert whole["done"] is True
    text = whole["response"] if path == "/api/generate" else whole["message"]["content"]
    assert text
    assert all(type(whole[metric]) is int for metric in METRICS)


# Load / unload semantics


async def test_c33_generate_without_prompt_loads(door: OllamaDoor) -> None:
    async with door.client() as client:
        await unload(client, "llama3.2:latest")
        response = await client.post("/api/generate", json={"model": "llama3.2"})
        loaded = await loaded_names(client)
    assert response.content.strip().count(b"\n") == 0, "one object, even without stream: false"
    whole = response.json()
    assert (whole["done"], whole["done_reason"], whole["response"]) == (True, "load", "")
    assert whole["model"] == "llama3.2"
    assert "llama3.2:latest" in loaded


async def test_c34_chat_without_messages_loads(door: OllamaDoor) -> None:
    async with door.client() as client:
        await unload(client, "llama3.2:latest")
        response = await client.post("/api/chat", json={"model": "llama3.2", "messages": []})
        loaded = await loaded_names(client)
    whole = response.json()
    assert (whole["done"], whole["done_reason"]) == (True, "load")
    assert whole["message"] == {"role": "assistant", "content": ""}
    assert "llama3.2:latest" in loaded


async def test_c35_keep_alive_zero_unloads_without_loading_first(door: OllamaDoor) -> None:
    async with door.client() as client:
        assert "mistral:latest" not in await loaded_names(client)
        response = await client.post("/api/generate", json={"model": "mistral", "keep_alive": 0})
        loaded = await loaded_names(client)
    whole = response.json()
    assert (whole["done"], whole["done_reason"], whole["response"]) == (True, "unload", "")
    assert "mistral:latest" not in loaded
    state = await door.engine_state()
    assert "mistral:latest" not in json.dumps(state["loaded"])


# Concurrency and cancellation


async def test_c60_client_disconnect_stops_upstream_generation(slow_door: OllamaDoor) -> None:
    before = (await slow_door.engine_state())["cancelled"]
    async with (
        slow_door.client() as client,
        client.stream("POST", "/api/generate", json=PROMPT) as response,
    ):
        async for line in response.aiter_lines():
            assert json.loads(line)["done"] is False
            break
    # 400 tokens take 20 s; the engine must see the cancel after a few token delays.
    async with asyncio.timeout(40 * SLOW_TOKEN_DELAY):
        while (state := await slow_door.engine_state())["cancelled"] == before:
            await asyncio.sleep(SLOW_TOKEN_DELAY / 2)
    cancelled = [record for record in state["finished"] if record["state"] == "cancelled"]
    assert cancelled[-1]["tokens"] < 400
