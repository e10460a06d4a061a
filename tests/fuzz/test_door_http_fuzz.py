"""Fuzzed requests against a real front door application (aiohttp, in-process) with an engine
behind it: every answer is the engine's (for a request it would take) or a 4xx with a JSON
body, never a 5xx, and the door keeps serving a valid request afterwards."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given

from backend.protocol.proxy import Door, ProxyTargets, RouteTarget
from backend.workers.proxy.doors.app import DoorContext, build_app
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.failover import RetryPolicy
from tests.fuzz import strategies as fuzz
from tests.fuzz.budget import HTTP_EXAMPLES, fuzz_settings, measured, timeout_for
from tests.fuzz.test_door_parsing_fuzz import PATHS, make_body
from tests.unit.proxy.scripted_door import make_router

ENGINE_MODELS = ["llama3:latest", "Qwen"]
statuses: Counter[int] = Counter()
HEADERS = {
    "Content-Type": ["application/json", "text/plain", "", "application/json; charset=latin1"],
    "X-PAIR-Session": ["s1", "", " ", "x" * 500],
    "Authorization": ["Bearer x", "Basic", ""],
    "Accept": ["*/*", "text/event-stream", ""],
    "Content-Encoding": ["identity"],
    "X-Forwarded-For": ["10.0.0.1"],
}
Client = TestClient[web.Request, web.Application]


async def _engine(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"engine": True})


class DoorRig:
    """A door application serving in-process, the engine behind it, and a client for it."""

    def __init__(self, door: Door) -> None:
        self.door: Door = door
        engine = web.Application()
        engine.router.add_route("*", "/{tail:.*}", _engine)
        self.engine = TestServer(engine)
        self.session = aiohttp.ClientSession()
        self.router = make_router(self.session, policy=RetryPolicy(schedule=(0.01,)))
        self.client: Client | None = None

    async def start(self) -> Client:
        await self.engine.start_server()
        base_url = str(self.engine.make_url("")).rstrip("/")
        target = RouteTarget(node_id="self", kind="local", base_url=base_url, models=ENGINE_MODELS)
        engines = {"ollama": [target], "lmstudio": [target]}
        self.router.update(ProxyTargets(node_id="self", engines=engines))
        context = DoorContext(self.door, self.router, RelayBoard())
        self.client = TestClient(TestServer(build_app(context)))
        await self.client.start_server()
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.router.close()
        await self.session.close()
        await self.engine.close()


async def _rig(door: Door) -> DoorRig:
    return DoorRig(door)  # its client session binds to the running loop


def _request(rng: random.Random, door: Door) -> tuple[str, str, dict[str, str], bytes]:
    paths = PATHS if door == "ollama" else [p for p in PATHS if p.startswith("/v1/")]
    path = rng.choice(paths)
    if rng.random() < 0.1:
        path += rng.choice(["?stream=true", "/", "x", "?a=%ff"])
    method = "POST" if rng.random() < 0.9 else rng.choice(["GET", "PUT", "DELETE", "PATCH"])
    headers = {name: rng.choice(values) for name, values in HEADERS.items() if rng.random() < 0.3}
    body = make_body(rng)
    if len(body) > 256 * 1024:
        body = body[: 256 * 1024]
    return method, path, headers, body


async def _send(client: Client, request: tuple[str, str, dict[str, str], bytes]) -> None:
    method, path, headers, body = request
    async with asyncio.timeout(10):
        response = await client.request(method, path, headers=headers, data=body)
        raw = await response.read()
    statuses[response.status] += 1
    assert response.status < 500, (response.status, raw[:300])
    if response.status >= 400:
        document: Any = json.loads(raw)
        assert isinstance(document, dict) and "error" in document, raw[:300]
    else:
        assert json.loads(raw) == {"engine": True}


async def _valid(client: Client, door: Door) -> None:
    path = "/api/chat" if door == "ollama" else "/v1/chat/completions"
    body = {"model": ENGINE_MODELS[0], "messages": [{"role": "user", "content": "hi"}]}
    async with asyncio.timeout(10):
        response = await client.post(path, json=body)
        assert response.status == 200 and await response.json() == {"engine": True}


@timeout_for(HTTP_EXAMPLES, 0.2)
def test_fuzzed_requests_are_answered_4xx_json_and_the_door_keeps_serving() -> None:
    with asyncio.Runner() as runner, measured("door-http", peak_limit=64 << 20) as bounds:
        doors: tuple[Door, ...] = ("ollama", "openai")
        rigs = {door: runner.run(_rig(door)) for door in doors}
        clients = {door: runner.run(rig.start()) for door, rig in rigs.items()}
        try:

            @fuzz_settings(HTTP_EXAMPLES)
            @given(fuzz.rngs)
            def run(rng: fuzz.SeededRandom) -> None:
                door: Door = rng.choice(["ollama", "openai"])
                request = _request(rng, door)
                with bounds.example():
                    runner.run(_send(clients[door], request))

            run()
            print(f"FUZZ door-http: statuses {sorted(statuses.items())}")
            for door, client in clients.items():
                runner.run(_valid(client, door))
        finally:
            for rig in rigs.values():
                runner.run(rig.close())


async def test_body_that_does_not_decompress_is_a_4xx() -> None:
    # Found by fuzzing the headers: a gzip or deflate body that is not compressed data was
    # answered 500 in plain text.
    rig = DoorRig("ollama")
    client = await rig.start()
    try:
        for encoding in ("gzip", "deflate"):
            response = await client.post(
                "/api/chat", data=b"\x00junk", headers={"Content-Encoding": encoding}
            )
            assert 400 <= response.status < 500 and "error" in json.loads(await response.read())
        await _valid(client, "ollama")
    finally:
        await rig.close()
