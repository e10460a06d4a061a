"""A member's client that hangs up in the middle of a relayed stream is an everyday event on
the serving side: one line in the log saying so, never a traceback.

Node B's relay serves its Ollama emulator over real TLS; node A's client reads the first
records of a stream and closes its connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator

import aiohttp
import msgspec
import pytest
from aiohttp import web

from backend.components.proxy.component import identity_payload
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import RouteTarget
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.relay.app import build_relay_app
from backend.workers.proxy.relay.peer_tls import PeerTls, credentials_from
from backend.workers.proxy.relay.serving import RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router
from tests.unit.proxy.test_relay_app import NODE_A, NODE_B, Relay, _client_of

# A stream long enough to be cut in the middle: 400 tokens, 5 ms apart.
SLOW = TimingModel(load_delay=0.01, token_delay=0.005)
HEADERS = {"X-PAIR-Job": "node-a/r1/7", "X-PAIR-Attempt": "1", "X-PAIR-Origin": "node-a"}


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    config = OllamaConfig(models=("llama3.2",), timing=SLOW, reply_tokens=400)
    engine = EmulatorServer(build_ollama_app(config))
    await engine.start()
    peer_tls = PeerTls()
    peer_tls.adopt_identity(credentials_from(identity_payload(NODE_B)))
    jobs: list[dict[str, object]] = []

    def sent(events: list[JobEvent]) -> None:
        jobs.extend(msgspec.to_builtins(event) for event in events)

    async with aiohttp.ClientSession() as session:
        router = make_router(session, JobLog(sent), clock=FakeClock(), peer_tls=peer_tls)
        local = RouteTarget(
            node_id="node-b", kind="local", base_url=engine.url, models=["llama3.2:latest"]
        )
        context = DoorContext("ollama", router, RelayBoard())
        served = Relay("", peer_tls, context, local, jobs)
        served.trust(NODE_A.cert_der)
        runner = web.AppRunner(
            build_relay_app({"ollama": context}, context.board, peer_tls),
            handler_cancellation=True,
        )
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock, ssl_context=peer_tls.server_context())
        await site.start()
        served.url = f"https://127.0.0.1:{sock.getsockname()[1]}"
        try:
            yield served
        finally:
            await runner.cleanup()
            await engine.stop()


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
            ssl=_client_of(NODE_A),
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
