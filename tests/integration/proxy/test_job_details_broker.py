"""Job details through a real ``pair node`` and an emulated Ollama: a streamed answer's job
records when its first chunk reached the client and how many chunks it had, with its timeline
(``jobs:get``); a request for a model no node has is answered 404 and listed as a failed job
with the door's message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import Broker
from tests.integration.durability.conftest import PACED_OLLAMA_SHIM
from tests.integration.engines.conftest import write_override, write_script
from tests.support.ports import free_port

MODEL = "tinyllama:latest"


def _node(tmp_path: Path) -> Path:
    """A data dir whose ``ollama`` is the emulator: 12 tokens 10 ms apart."""
    data_dir = tmp_path / "node"
    shim = write_script(tmp_path / "ollama", PACED_OLLAMA_SHIM)
    runtime = {"port": free_port(), "ready": {"timeout_s": 30}, "health": {"interval_s": 0.5}}
    write_override(data_dir, "ollama", {"detect": [{"path": str(shim)}], "runtime": runtime})
    return data_dir


async def _chat(door: str, model: str) -> tuple[int, bytes, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(door + "/api/chat", json=body) as response,
    ):
        return response.status, await response.read(), response.headers.get("X-PAIR-Job", "")


async def _served(door: str) -> str:
    """The job key of the first answer, once the routing table has the engine's model."""
    for _ in range(300):
        status, _, key = await _chat(door, MODEL)
        if status == 200:
            return key
        await asyncio.sleep(0.1)
    raise AssertionError(f"{MODEL} was never served")


async def _job(client: Any, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for _ in range(100):
        snapshot = await client.call("jobs:get-initial", {"limit": 50})
        found = [job for job in snapshot["workloads"] if predicate(job)]
        if found:
            return dict(found[0])
        await asyncio.sleep(0.1)
    raise AssertionError("no such job")


@pytest.mark.timeout(120)
async def test_a_stream_s_job_has_its_first_chunk_its_chunks_and_its_timeline(
    start_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    broker = start_broker(data_dir=_node(tmp_path))
    async with broker.connect(engine_events=False) as client:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        door = (await client.call("status"))["front_doors"]["ollama"]
        await _served(door)
        status, body, _ = await _chat(door, MODEL)
        assert status == 200 and b'"done":true' in body.replace(b" ", b"")
        job = await _job(client, lambda j: j["state"] == "completed" and "chunks" in j)
        details = await client.call("jobs:get", {"key": job["key"]})
        status, _, _ = await _chat(door, "nope:1b")
        refused = await _job(client, lambda j: j["model"] == "nope:1b")
    record = details["job"]
    assert record["started_at"] <= record["first_token_at"] <= record["completed_at"]
    assert record["chunks"] > 1
    assert [step["kind"] for step in details["timeline"]] == ["submitted", "started", "completed"]
    assert status == 404
    assert (refused["state"], refused["error"]) == ("failed", "model 'nope:1b' not found")
