"""A job's end is in ``pair.db`` before the client has its whole answer: a ``kill -9`` of the
real ``pair node`` the moment a client read its answer leaves that job completed after the
restart, not failed as interrupted (or missing)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import Broker

StartBroker = Callable[..., Broker]
MODEL = "tinyllama:latest"


async def _answered(door: str, *, stream: bool) -> bytes:
    """One chat request's whole answer, read to its end."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with (
        aiohttp.ClientSession() as session,
        session.post(door + "/api/chat", json=body) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.read()


async def _first_answer(door: str, *, stream: bool) -> None:
    """A first answer, once the routing table has the engine's model (the door's model list
    may have it before the table does: until then the request is 404)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            async with session.post(door + "/api/chat", json=body) as response:
                await response.read()
                if response.status == 200:
                    return
                assert response.status in (404, 503), response.status
            await asyncio.sleep(0.1)
    raise AssertionError(f"{MODEL} was never served")


async def _jobs_after_restart(start_broker: StartBroker, data_dir: Path) -> list[dict[str, Any]]:
    broker = start_broker(data_dir=data_dir)
    async with broker.connect(engine_events=False) as client:
        snapshot = await client.call("jobs:get-initial", {"limit": 100})
    broker.stop()
    # A request the door refused before the table had the model is a failed job that names no
    # engine (it was sent to none).
    return [job for job in snapshot["workloads"] if job["engine"]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_job_whose_client_has_its_answer_survives_a_kill_9_of_the_broker(
    start_broker: StartBroker, paced_ollama_node: Path, stream: bool
) -> None:
    broker = start_broker(data_dir=paced_ollama_node)
    async with broker.connect(engine_events=False) as client:
        engine = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert engine["state"] == "running"
        door = (await client.call("status"))["front_doors"]["ollama"]
        # A first request warms the path, so the one that counts is a short one.
        await _first_answer(door, stream=stream)
        await asyncio.sleep(0.5)  # the first job is written by the periodic write
        answer = await _answered(door, stream=stream)
        os.kill(broker.process.pid, signal.SIGKILL)
    await asyncio.to_thread(broker.process.wait)
    assert b'"done":true' in answer.replace(b" ", b"")
    jobs = await _jobs_after_restart(start_broker, paced_ollama_node)
    assert len(jobs) == 2, jobs
    assert [job["state"] for job in jobs] == ["completed", "completed"], jobs


@pytest.mark.timeout(120)
async def test_the_journal_of_ends_the_broker_stored_is_deleted(
    start_broker: StartBroker, paced_ollama_node: Path
) -> None:
    broker = start_broker(data_dir=paced_ollama_node)
    async with broker.connect(engine_events=False) as client:
        engine = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert engine["state"] == "running"
        door = (await client.call("status"))["front_doors"]["ollama"]
        await _first_answer(door, stream=True)
        await _answered(door, stream=False)
        journal = paced_ollama_node / "jobs-journal"
        for _ in range(100):  # sealed within a second, deleted once the broker confirms
            if not await asyncio.to_thread(_journaled_ends, journal):
                break
            await asyncio.sleep(0.1)
        assert not await asyncio.to_thread(_journaled_ends, journal)
        assert await asyncio.to_thread(journal.is_dir)  # this run's worker journals there
    broker.stop()


def _journaled_ends(journal: Path) -> list[bytes]:
    return [line for path in journal.rglob("*.jsonl") for line in path.read_bytes().splitlines()]
