"""A front door's application in-process, with no engine behind it: the gate, the cap, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from backend.protocol.proxy import Door, ProxyTargets, RouteTarget
from backend.workers.proxy.doors import app as door_app
from backend.workers.proxy.doors.app import CONTEXT_KEY, DoorContext, build_app, gate
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.failover import RetryPolicy
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

# Nothing listens here: a request that reaches "the engine" fails with 502.
DEAD_ENGINE = RouteTarget(
    node_id="self", kind="local", base_url="http://127.0.0.1:9", models=["llama3:latest", "Qwen"]
)
TARGETS = ProxyTargets(node_id="self", engines={"ollama": [DEAD_ENGINE], "lmstudio": [DEAD_ENGINE]})


def _context(door: Door, session: aiohttp.ClientSession) -> DoorContext:
    router = make_router(session, clock=FakeClock(), policy=RetryPolicy(schedule=(0.01,)))
    router.update(TARGETS)
    return DoorContext(door, router, RelayBoard())


async def _client(door: Door) -> TestClient[web.Request, web.Application]:
    session = aiohttp.ClientSession()
    client = TestClient(TestServer(build_app(_context(door, session))))
    client.app.on_cleanup.append(lambda _: session.close())
    await client.start_server()
    return client


@pytest.fixture
async def ollama_door() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    client = await _client("ollama")
    yield client
    await client.close()


@pytest.fixture
async def openai_door() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    client = await _client("openai")
    yield client
    await client.close()


async def test_body_over_the_cap_is_refused_with_or_without_a_length(
    ollama_door: TestClient[web.Request, web.Application], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(door_app, "MAX_BODY_BYTES", 1024)
    declared = await ollama_door.post("/api/chat", data=b"x" * 2048)
    assert declared.status == 413 and "error" in await declared.json()

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"y" * 512

    streamed = await ollama_door.post("/api/chat", data=chunks())
    assert streamed.status == 413


async def test_malformed_and_modelless_bodies_are_400_in_the_ollama_shape(
    ollama_door: TestClient[web.Request, web.Application],
) -> None:
    for body in (b"{oops", b'{"prompt": "x"}'):
        response = await ollama_door.post("/api/generate", data=body)
        assert response.status == 400
        assert isinstance((await response.json())["error"], str)


async def test_unknown_model_is_404_in_each_dialect_and_known_ones_go_to_the_engine(
    ollama_door: TestClient[web.Request, web.Application],
    openai_door: TestClient[web.Request, web.Application],
) -> None:
    ollama_unknown = await ollama_door.post("/api/chat", json={"model": "mistral"})
    assert (ollama_unknown.status, await ollama_unknown.json()) == (
        404,
        {"error": "model 'mistral' not found"},
    )
    openai_unknown = await openai_door.post("/v1/chat/completions", json={"model": "mistral"})
    assert openai_unknown.status == 404
    assert (await openai_unknown.json())["error"]["code"] == "model_not_found"
    # Ollama's "qwen" is a model of this node (its engine lists "Qwen"), reached from any door.
    other_engines = await openai_door.post("/v1/chat/completions", json={"model": "qwen"})
    assert other_engines.status == 502  # it was sent on, to the dead engine
    forwarded = await ollama_door.post("/api/chat", json={"model": "llama3"})
    assert forwarded.status == 502  # it was sent on, to the dead engine
    assert "X-PAIR-Proxy-Ms" in forwarded.headers


async def test_rebinding_host_and_foreign_origin_are_403(
    openai_door: TestClient[web.Request, web.Application],
) -> None:
    rebound = await openai_door.get("/v1/models", headers={"Host": "evil.example"})
    assert rebound.status == 403
    assert set((await rebound.json())["error"]) == {"message", "type", "param", "code"}
    foreign = await openai_door.get("/v1/models", headers={"Origin": "http://evil.example"})
    assert foreign.status == 403 and "access-control-allow-origin" not in foreign.headers


async def test_lan_peer_is_refused_with_a_json_reason() -> None:
    app = build_app(_context("ollama", mock.Mock()))
    transport = mock.Mock()
    transport.get_extra_info.return_value = ("192.168.1.20", 50000)
    request = make_mocked_request(
        "GET", "/api/tags", headers={"Host": "192.168.1.5:11434"}, app=app, transport=transport
    )
    assert request.app[CONTEXT_KEY].door == "ollama"

    async def engine(_: web.Request) -> web.StreamResponse:
        raise AssertionError("a refused request reached the handler")

    response = await gate(request, engine)
    assert isinstance(response, web.Response) and response.status == 403
    assert response.text is not None and "loopback" in response.text
