"""What completes an answer waits until the broker has stored its job's end.

A broker killed just after a client had its whole answer must still find that job completed
in its store. So the bytes that complete the answer (a stream's final marker, a counted
body's last bytes, a translated whole answer) go out only once the broker confirms it stored
every job event sent so far; a broker that answers with an error (or not in time) does not
hold the answer back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol import errors
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import FLUSH_S, JobLog
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.serving import RelayBoard
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import Door, make_router, scripted_door

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class Broker:
    """Stores job events when told to; records every wait for the store."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.waits = 0
        self.release = asyncio.Event()
        self.fail = False

    def notify(self, events: list[JobEvent]) -> None:
        self.kinds += [event.kind for event in events]

    async def stored(self) -> None:
        self.waits += 1
        if self.fail:
            raise errors.CallTimeout("proxy:jobs-stored: no answer within 1 s")
        await self.release.wait()


@contextlib.asynccontextmanager
async def _door(broker: Broker, engine: ScriptedEngine) -> AsyncIterator[Door]:
    log = JobLog(broker.notify, flush_s=FLUSH_S, stored=broker.stored)
    async with scripted_door(engine, log, slots=4) as client:
        yield client


async def _read_until_stored(broker: Broker, read: Callable[[], Awaitable[bytes]]) -> bytes:
    """Start reading the answer; it must not end before the broker stored the job."""
    reading = asyncio.ensure_future(read())
    for _ in range(200):
        if broker.waits:
            break
        await asyncio.sleep(0.01)
    assert broker.waits == 1 and "completed" in broker.kinds
    await asyncio.sleep(0.2)
    assert not reading.done(), "the client had its whole answer before the job was stored"
    broker.release.set()
    return await asyncio.wait_for(reading, 5)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "counted"])
async def test_the_answer_is_completed_only_once_the_job_s_end_is_stored(stream: bool) -> None:
    broker = Broker()
    async with _door(broker, ScriptedEngine("e", tokens=3)) as door:

        async def answer() -> bytes:  # a counted answer's headers go with its body
            response = await door.post("/api/chat", json={**CHAT, "stream": stream})
            assert response.status == 200
            return await response.read()

        body = await _read_until_stored(broker, answer)
    assert b'"done": true' in body


async def test_a_broker_that_cannot_confirm_does_not_hold_the_answer() -> None:
    broker = Broker()
    broker.fail = True
    async with _door(broker, ScriptedEngine("e", tokens=3)) as door:
        response = await door.post("/api/chat", json={**CHAT, "stream": True})
        body = await asyncio.wait_for(response.read(), 5)
    assert b'"done": true' in body and broker.waits == 1


async def test_a_failed_answer_does_not_wait_for_the_store() -> None:
    broker = Broker()
    async with _door(broker, ScriptedEngine("e", behaviour="cut", tokens=3)) as door:
        response = await door.post("/api/chat", json={**CHAT, "stream": True})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(response.read(), 5)
    assert "errored" in broker.kinds and broker.waits == 0


async def test_a_load_request_the_door_answers_waits_for_the_store_too() -> None:
    broker = Broker()
    log = JobLog(broker.notify, flush_s=FLUSH_S, stored=broker.stored)
    async with aiohttp.ClientSession() as session:
        router = make_router(session, log)
        # An engine PAIR translates Ollama's API for: Ollama's load request is answered here.
        target = RouteTarget(
            node_id="self",
            kind="local",
            base_url="http://127.0.0.1:9",
            models=["m"],
            engine="llamacpp",
        )
        router.update(ProxyTargets(node_id="self", engines={"llamacpp": [target]}))
        app = build_app(DoorContext("ollama", router, RelayBoard()))
        async with TestClient(TestServer(app)) as door:

            async def answer() -> bytes:
                response = await door.post("/api/chat", json={"model": "m", "messages": []})
                assert response.status == 200
                return await response.read()

            body = await _read_until_stored(broker, answer)
        await router.close()
    assert b'"done"' in body
