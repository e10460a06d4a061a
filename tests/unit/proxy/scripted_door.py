"""An ollama door in-process over a router whose one local engine is a ``ScriptedEngine``;
``make_router``, the router every in-process door test builds; and ``spy_relay``, which notes
what the door writes to its clients in order."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.core.clock import Clock, SystemClock
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.channels.custody import Custody
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.doors.app import DoorContext, build_app
from backend.workers.proxy.relay.peer_tls import PeerTls
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.dispatch import Router
from backend.workers.proxy.routing.failover import RandomSource, RetryPolicy
from backend.workers.proxy.routing.links import Links
from backend.workers.proxy.scheduler.engine_scheduler import LoadFailed
from backend.workers.proxy.upstream import stream
from backend.workers.proxy.upstream.engine_client import EngineClient
from tests.integration.proxy.scripted import ScriptedEngine, start_engine

Door = TestClient[web.Request, web.Application]
# What happened, in order: ("client", bytes) / ("client-end", bytes) for the door's writes, and
# whatever else a test appends (what the broker was told, what the journal holds).
Timeline = list[tuple[str, Any]]


def spy_relay(monkeypatch: pytest.MonkeyPatch, seen: Timeline) -> None:
    """Note in ``seen`` every write of the door's relay to its clients, as it happens."""
    write, write_eof = stream._Relayed.write, stream._Relayed.write_eof
    send_now = stream._Relayed.send_now

    async def spy_write(self: web.StreamResponse, data: bytes) -> None:
        seen.append(("client", bytes(data)))
        await write(self, data)

    def spy_send_now(
        self: stream._Relayed, transport: asyncio.Transport, chunked: bool, data: bytes
    ) -> None:  # the chunks after the first, written from the engine connection's callback
        seen.append(("client", bytes(data)))
        send_now(self, transport, chunked, data)

    async def spy_write_eof(self: web.StreamResponse, data: bytes = b"") -> None:
        seen.append(("client-end", bytes(data)))
        await write_eof(self, data)

    monkeypatch.setattr(stream._Relayed, "write", spy_write)
    monkeypatch.setattr(stream._Relayed, "write_eof", spy_write_eof)
    monkeypatch.setattr(stream._Relayed, "send_now", spy_send_now)


def make_router(
    session: aiohttp.ClientSession,
    jobs: JobLog | None = None,
    *,
    clock: Clock | None = None,
    rng: RandomSource | None = None,
    policy: RetryPolicy | None = None,
    peer_tls: PeerTls | None = None,
) -> Router:
    """A router over ``session`` with no broker behind it (no custody, no model switches) and
    no peer to ask; job events go to ``jobs`` (nowhere by default)."""
    links = Links(
        session=session,
        retry_session=session,
        engines=EngineClient(),
        peer_tls=peer_tls if peer_tls is not None else PeerTls(),
        jobs=jobs if jobs is not None else JobLog(lambda events: None),
        custody=Custody(None),
        load_model=_no_broker,
        on_started=lambda key, attempt: None,
        on_scheduler_change=lambda: None,
    )
    return Router(
        links,
        clock=clock if clock is not None else SystemClock(),
        rng=rng if rng is not None else random.Random(0),
        policy=policy if policy is not None else RetryPolicy(),
    )


async def _no_broker(engine: str, model: str) -> int:
    raise LoadFailed(f"{engine} cannot switch to {model} here")


@contextlib.asynccontextmanager
async def scripted_door(engine: ScriptedEngine, jobs: JobLog, *, slots: int) -> AsyncIterator[Door]:
    """The door's test client; ``engine`` (started here) has ``slots`` slots; job events go
    to ``jobs``. Everything is stopped on the way out."""
    await start_engine(engine)
    assert engine.server is not None
    session = aiohttp.ClientSession()
    router = make_router(session, jobs)
    target = RouteTarget(
        node_id="self", kind="local", base_url=engine.url, models=["m:latest"], slots=slots
    )
    router.update(ProxyTargets(node_id="self", engines={"ollama": [target]}))
    client = TestClient(TestServer(build_app(DoorContext("ollama", router, RelayBoard()))))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        await router.close()
        await session.close()
        await engine.server.stop()
