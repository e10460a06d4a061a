"""Slots, FIFO queueing and disconnect cancellation of the Ollama emulator standing in for
Ollama, observed through its introspection endpoint (never through wall-clock speed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import ollama

from backend.devtools.emulators.generation import TimingModel
from tests.integration.emulators.conftest import Emulator, StartOllama

SLOW = TimingModel(load_delay=0.01, token_delay=0.02)
PROMPT = {"model": "llama3.2", "prompt": "tell me a long story"}


async def _drain(parts: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in parts]


def _by_start(state: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(state["finished"], key=lambda record: record["started_at"])


async def test_ollama_emulator_with_one_slot_runs_the_second_stream_after_the_first(
    start_ollama: StartOllama,
) -> None:
    emulator = await start_ollama(timing=SLOW, parallel=1, reply_tokens=25)
    client = ollama.AsyncClient(host=emulator.url)
    first = await client.generate(PROMPT["model"], PROMPT["prompt"], stream=True)
    first_part = await anext(first)
    # The client sends a streamed request only when it is iterated: drain it in a task.
    second = asyncio.ensure_future(
        _drain(await client.generate(PROMPT["model"], "another story", stream=True))
    )
    busy = await emulator.wait_state(lambda s: len(s["queued"]) == 1 and len(s["active"]) == 1)
    assert busy["loaded"][0]["parallel"] == 1 and busy["loaded"][0]["queued"] == 1
    rest_first = [part async for part in first]
    parts_second = await second
    assert [first_part, *rest_first][-1].done and parts_second[-1].done
    earlier, later = _by_start(await emulator.state())
    assert later["started_at"] >= earlier["finished_at"], "the queued request waited its turn"
    assert later["enqueued_at"] < earlier["finished_at"]


async def test_ollama_emulator_with_two_slots_overlaps_two_streams(
    start_ollama: StartOllama,
) -> None:
    emulator = await start_ollama(timing=SLOW, parallel=2, reply_tokens=25)
    client = ollama.AsyncClient(host=emulator.url)
    first = await client.generate(PROMPT["model"], PROMPT["prompt"], stream=True)
    await anext(first)
    second = await client.generate(PROMPT["model"], "another story", stream=True)
    await anext(second)
    state = await emulator.state()
    assert len(state["active"]) == 2 and state["queued"] == []
    _ = [part async for part in first], [part async for part in second]
    earlier, later = _by_start(await emulator.state())
    assert later["started_at"] < earlier["finished_at"]


async def test_ollama_emulator_cancels_generation_when_the_client_disconnects(
    start_ollama: StartOllama,
) -> None:
    emulator = await start_ollama(timing=SLOW, parallel=1, reply_tokens=200)
    async with (
        httpx.AsyncClient(base_url=emulator.url, timeout=10) as client,
        client.stream("POST", "/api/generate", json=PROMPT) as response,
    ):
        lines = response.aiter_lines()
        first = json.loads(await anext(lines))
        assert first["done"] is False
    state = await emulator.wait_state(lambda s: s["cancelled"] == 1)
    (record,) = state["finished"]
    assert record["state"] == "cancelled" and record["tokens"] < 200
    assert state["active"] == [] and state["loaded"][0]["active"] == 0, "the slot is free"
    after = await ollama.AsyncClient(host=emulator.url).generate("llama3.2", "next")
    assert after.done and after.done_reason == "stop"


async def test_ollama_emulator_drops_a_queued_request_whose_client_left(
    start_ollama: StartOllama,
) -> None:
    emulator = await start_ollama(timing=SLOW, parallel=1, reply_tokens=100)
    async with (
        httpx.AsyncClient(base_url=emulator.url, timeout=10) as client,
        client.stream("POST", "/api/generate", json=PROMPT) as running,
    ):
        lines = running.aiter_lines()  # keep it: dropping it closes the connection
        await anext(lines)
        # Headers come with the first token, so a queued request waits for its response.
        queued = asyncio.ensure_future(client.post("/api/generate", json=PROMPT))
        await emulator.wait_state(lambda s: len(s["queued"]) == 1)
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        state = await emulator.wait_state(lambda s: s["cancelled"] == 1)
        (dropped,) = state["finished"]
        assert dropped["started_at"] is None and dropped["tokens"] == 0
        assert len(state["active"]) == 1, "the running request goes on"
    await emulator.wait_state(lambda s: s["cancelled"] == 2 and s["active"] == [])


async def test_ollama_emulator_keep_alive_zero_on_a_request_unloads_after_it(
    ollama_emulator: Emulator,
) -> None:
    client = ollama.AsyncClient(host=ollama_emulator.url)
    await client.generate("llama3.2", "hi", keep_alive=0)
    assert (await client.ps()).models == []
    await client.generate("llama3.2", "hi", keep_alive="10m")
    assert [model.name for model in (await client.ps()).models] == ["llama3.2:latest"]
