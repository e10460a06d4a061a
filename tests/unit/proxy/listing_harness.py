"""Servers and doors for the model list tests: stand-in upstreams, emulators, a door app
whose list and show routes are ``listing``'s functions over a table of any engines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.lmstudio import build_lmstudio_app
from backend.devtools.emulators.lmstudio_state import LmStudioConfig
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import DOOR_ENGINES, Door, ProxyTargets, RouteTarget, TargetKind
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.listing import federated_list, federated_model, show_model
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.candidates import owners
from backend.workers.proxy.upstream.forward import STARTED_KEY
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

DoorClient = TestClient[web.Request, web.Application]
# Nothing listens on the discard port: connecting to it is refused at once.
DEAD_URL = "http://127.0.0.1:9"
QUICK = TimingModel(load_delay=0.01, token_delay=0.002)


@dataclass
class StandIn:
    """A tiny HTTP server answering every GET with ``answer``; it records what it was sent."""

    answer: Callable[[], web.StreamResponse | Awaitable[web.StreamResponse]]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            self.seen.append((request.path_qs, dict(request.headers)))
            answer = self.answer()
            return await answer if isinstance(answer, Awaitable) else answer

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle, allow_head=False)
        return app


@dataclass
class Harness:
    """Starts servers and door clients for one test and stops them all afterwards."""

    session: aiohttp.ClientSession
    servers: list[EmulatorServer] = field(default_factory=list)
    clients: list[DoorClient] = field(default_factory=list)
    stand_ins: list[StandIn] = field(default_factory=list)

    async def serve(self, app: web.Application) -> str:
        """Serve ``app`` on a free loopback port; its base URL."""
        server = EmulatorServer(app)
        self.servers.append(server)
        await server.start()
        return server.url

    async def ollama(self, *models: str) -> str:
        return await self.serve(build_ollama_app(OllamaConfig(models=models, timing=QUICK)))

    async def lmstudio(self, *models: str) -> str:
        return await self.serve(build_lmstudio_app(LmStudioConfig(models=models, timing=QUICK)))

    async def stand_in(
        self, answer: Callable[[], web.StreamResponse | Awaitable[web.StreamResponse]]
    ) -> tuple[str, StandIn]:
        stand_in = StandIn(answer)
        self.stand_ins.append(stand_in)
        return await self.serve(stand_in.app()), stand_in

    async def door(self, door: Door, *targets: RouteTarget) -> DoorClient:
        """A door app over ``targets`` of the door's own engine, in table order."""
        return await self.door_over(door, {DOOR_ENGINES[door]: list(targets)})

    async def door_over(self, door: Door, engines: Mapping[str, list[RouteTarget]]) -> DoorClient:
        """A door app whose list routes are ``federated_list`` (and ``federated_model``,
        ``show_model``) over every engine of ``engines``."""
        table = ProxyTargets(node_id="self", engines=dict(engines))
        router = make_router(self.session, clock=FakeClock())
        router.update(table)
        app = door_app(DoorContext(door, router, RelayBoard()))
        client: DoorClient = TestClient(TestServer(app))
        self.clients.append(client)
        await client.start_server()
        return client


@contextlib.asynccontextmanager
async def running_harness() -> AsyncIterator[Harness]:
    """A harness whose servers and clients are stopped on the way out."""
    async with aiohttp.ClientSession() as session:
        running = Harness(session)
        try:
            yield running
        finally:
            for stand_in in running.stand_ins:
                stand_in.release.set()
            for client in running.clients:
                await client.close()
            for server in running.servers:
                await server.stop()


def door_app(context: DoorContext) -> web.Application:
    """``/api/tags``, ``/api/ps``, ``/v1/models[/{id}]`` and ``/api/show`` served by listing."""

    def listed(kind: Any) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await federated_list(request, context, kind)

        return handle

    async def model(request: web.Request) -> web.StreamResponse:
        return await federated_model(request, context, request.match_info["model_id"])

    async def show(request: web.Request) -> web.StreamResponse:
        request[STARTED_KEY] = 0.0
        body = await request.read()
        name = (await request.json()).get("model", "")
        found = owners(context.router.table, name, "ollama")
        if not found:
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        return await show_model(request, context, found[0], body)

    app = web.Application()
    for path, kind in (("/api/tags", "tags"), ("/api/ps", "ps"), ("/v1/models", "models")):
        app.router.add_get(path, listed(kind), allow_head=False)
    app.router.add_get("/v1/models/{model_id:.+}", model, allow_head=False)
    app.router.add_post("/api/show", show)
    return app


def target(kind: TargetKind, base_url: str, node_id: str = "") -> RouteTarget:
    return RouteTarget(node_id=node_id or f"{kind}-node", kind=kind, base_url=base_url)


def json_answer(body: Any) -> Callable[[], web.StreamResponse]:
    return lambda: web.json_response(body)


def tag(name: str, **extra: Any) -> dict[str, Any]:
    """An ``/api/tags`` entry as a peer would send it."""
    return {"name": name, "model": name, "size": 1, **extra}


async def get_json(client: DoorClient, path: str, **kwargs: Any) -> tuple[int, Any]:
    response = await client.get(path, **kwargs)
    return response.status, await response.json()
