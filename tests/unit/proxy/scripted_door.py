"""An ollama door in-process over a router whose one local engine is a ``ScriptedEngine``."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.core.clock import SystemClock
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.doors.app import DoorContext, build_app
from backend.workers.proxy.routing.dispatch import Router
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.relay.serving import RelayBoard
from tests.integration.proxy.scripted import ScriptedEngine, start_engine

Door = TestClient[web.Request, web.Application]


@contextlib.asynccontextmanager
async def scripted_door(engine: ScriptedEngine, jobs: JobLog, *, slots: int) -> AsyncIterator[Door]:
    """The door's test client; ``engine`` (started here) has ``slots`` slots; job events go
    to ``jobs``. Everything is stopped on the way out."""
    await start_engine(engine)
    assert engine.server is not None
    session = aiohttp.ClientSession()
    router = Router(session, jobs, clock=SystemClock(), rng=random.Random(0))
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
