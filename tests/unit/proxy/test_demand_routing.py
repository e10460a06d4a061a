"""The router feeds its demand meter: a front door's request counts as demand and local use, a
member's through the relay as local use only; a request waits in ``queued`` until it commits.

Node B's relay and an Ollama door over the same router, in-process, in front of the Ollama
emulator (``relay_rig.py``); the router's clock is fake, so the commit time is exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.protocol.proxy import LocalUse, ModelDemand
from backend.workers.proxy.doors.app import build_app
from tests.fakes import FakeClock
from tests.unit.proxy.relay_rig import NODE_A, Relay, client_of, serving_relay

MODEL = "llama3.2"
# The first request loads the model: long enough to see it wait, short for a test.
SLOW_LOAD = TimingModel(load_delay=0.5, token_delay=0.002)
COMMITTED_AT = FakeClock().wall()  # the rig's router's clock never moves


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    async with serving_relay(OllamaConfig(models=(MODEL,), timing=SLOW_LOAD)) as served:
        yield served


async def _door_chat(relay: Relay) -> int:
    client = TestClient(TestServer(build_app(relay.context)))
    await client.start_server()
    try:
        body = {"model": MODEL, "messages": [], "stream": False}
        response = await client.post("/api/chat", json=body)
        await response.read()
        return response.status
    finally:
        await client.close()


async def test_a_door_request_is_demand_and_local_use(relay: Relay) -> None:
    demand = relay.context.router.demand
    chat = asyncio.create_task(_door_chat(relay))
    try:
        async with asyncio.timeout(5):
            while demand.queued(MODEL) == 0:
                await asyncio.sleep(0.01)
        waiting = demand.queued(MODEL)
        assert await chat == 200
    finally:
        chat.cancel()

    report = demand.report(at=1.0)

    assert waiting == 1, "queued while the engine loads the model, before the commit"
    assert report is not None
    assert report.models == [ModelDemand(model=MODEL, requests=1, queued=0, owners=["node-b"])]
    assert report.local == [
        LocalUse(engine="ollama", model=f"{MODEL}:latest", last_used_at=COMMITTED_AT, active=0)
    ]


async def test_a_members_request_through_the_relay_is_local_use_only(relay: Relay) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{relay.url}/_pair/relay/ollama/api/chat",
            json={"model": MODEL, "messages": [], "stream": False},
            headers={"X-PAIR-Job": "node-a/r1/1", "X-PAIR-Attempt": "1", "X-PAIR-Origin": "node-a"},
            ssl=client_of(NODE_A),
        ) as response,
    ):
        assert response.status == 200
        await response.read()

    report = relay.context.router.demand.report(at=1.0)

    assert report is not None and report.models == []
    assert report.local == [
        LocalUse(engine="ollama", model=f"{MODEL}:latest", last_used_at=COMMITTED_AT, active=0)
    ]
