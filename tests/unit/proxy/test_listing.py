"""Federated model lists against real servers: emulators, stand-in peers, broken upstreams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import pytest
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
from backend.workers.proxy.doors import listing
from backend.workers.proxy.doors.listing import federated_list
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.candidates import RELAY_PREFIX
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

DoorClient = TestClient[web.Request, web.Application]
# Nothing listens on the discard port: connecting to it is refused at once.
DEAD_URL = "http://127.0.0.1:9"
QUICK = TimingModel(load_delay=0.01, token_delay=0.002)
SECRET_HEADERS = {"Authorization": "Bearer local-secret", "Cookie": "session=1"}


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
        """A door app whose list routes are ``federated_list``, over ``targets`` in table order."""
        table = ProxyTargets(node_id="self", engines={DOOR_ENGINES[door]: list(targets)})
        router = make_router(self.session, clock=FakeClock())
        router.update(table)
        context = DoorContext(door, router, RelayBoard())

        async def tags(request: web.Request) -> web.StreamResponse:
            return await federated_list(request, context, "tags")

        async def models(request: web.Request) -> web.StreamResponse:
            return await federated_list(request, context, "models")

        app = web.Application()
        app.router.add_get("/api/tags", tags, allow_head=False)
        app.router.add_get("/v1/models", models, allow_head=False)
        client: DoorClient = TestClient(TestServer(app))
        self.clients.append(client)
        await client.start_server()
        return client


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
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


async def test_ollama_tags_merge_local_first_and_dedupe_by_ollama_names(harness: Harness) -> None:
    local_url = await harness.ollama("llama3", "qwen2.5")
    peer_entries = [
        tag("LLaMA3", extra={"kept": True}),
        tag("phi3:mini", x_unknown=[1, 2.5, None]),
        tag("qwen2.5:latest"),
    ]
    peer_url, peer = await harness.stand_in(json_answer({"models": peer_entries}))
    engine_url = await harness.ollama("mistral", "llama3:latest")
    door = await harness.door(
        "ollama",
        target("peer", peer_url),
        target("engine", engine_url),
        target("local", local_url),
    )

    response = await door.get("/api/tags")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    merged = (await response.json())["models"]

    assert [entry["name"] for entry in merged] == [
        "llama3:latest",
        "qwen2.5:latest",
        "phi3:mini",
        "mistral:latest",
    ]
    async with harness.session.get(f"{local_url}/api/tags") as direct:
        local_entries = (await direct.json())["models"]
    assert merged[:2] == local_entries  # entries pass through unchanged
    assert merged[2] == peer_entries[1]
    assert [path for path, _ in peer.seen] == [f"{RELAY_PREFIX}/ollama/api/tags"]


async def test_ollama_v1_models_dedupe_by_the_same_rule_and_null_data_is_empty(
    harness: Harness,
) -> None:
    local_url = await harness.ollama("llama3")
    empty_url = await harness.ollama()  # Ollama answers ``data: null`` with nothing installed
    peer_data = [{"id": "llama3", "object": "model"}, {"id": "phi3:mini", "object": "model"}]
    peer_url, _ = await harness.stand_in(json_answer({"object": "list", "data": peer_data}))
    door = await harness.door(
        "ollama", target("local", local_url), target("engine", empty_url), target("peer", peer_url)
    )

    status, body = await get_json(door, "/v1/models")

    assert status == 200 and body["object"] == "list"
    assert [model["id"] for model in body["data"]] == ["llama3:latest", "phi3:mini"]
    assert body["data"][1] == peer_data[1]


async def test_lmstudio_models_dedupe_exactly(harness: Harness) -> None:
    local_url = await harness.lmstudio("qwen2.5-7b-instruct", "Llama-3")
    engine_url = await harness.lmstudio("llama-3", "qwen2.5-7b-instruct", "gemma-2")
    door = await harness.door("openai", target("local", local_url), target("engine", engine_url))

    status, body = await get_json(door, "/v1/models")

    assert status == 200
    assert [model["id"] for model in body["data"]] == [
        "qwen2.5-7b-instruct",
        "Llama-3",
        "llama-3",
        "gemma-2",
    ]
    assert body["data"][0] == {
        "id": "qwen2.5-7b-instruct",
        "object": "model",
        "owned_by": "organization_owner",
    }


async def test_dead_slow_and_malformed_upstreams_are_left_out(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listing, "LIST_TIMEOUT_S", 0.3)

    async def never_answers() -> web.StreamResponse:
        await harness.stand_ins[0].release.wait()
        return web.json_response({"models": []})

    slow_url, _ = await harness.stand_in(never_answers)
    bad_json_url, _ = await harness.stand_in(lambda: web.Response(text="{oops"))
    # LM Studio answers routes it does not have with HTTP 200 and an error object.
    wrong_shape_url, _ = await harness.stand_in(json_answer({"error": "Unexpected endpoint"}))
    failing_url, _ = await harness.stand_in(lambda: web.json_response({"models": []}, status=500))
    live_url = await harness.ollama("llama3")
    door = await harness.door(
        "ollama",
        target("engine", DEAD_URL, "dead"),
        target("engine", slow_url, "slow"),
        target("engine", bad_json_url, "bad-json"),
        target("engine", wrong_shape_url, "wrong-shape"),
        target("engine", failing_url, "failing"),
        target("engine", live_url, "live"),
    )

    status, body = await get_json(door, "/api/tags")

    assert status == 200
    assert [entry["name"] for entry in body["models"]] == ["llama3:latest"]
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    for node in ("dead", "slow", "bad-json", "wrong-shape", "failing"):
        assert f"({node})" in warned


async def test_every_upstream_failing_is_a_502_in_the_door_s_error_shape(
    harness: Harness,
) -> None:
    wrong_shape_url, _ = await harness.stand_in(json_answer({"error": "Unexpected endpoint"}))
    ollama_door = await harness.door("ollama", target("local", DEAD_URL))
    openai_door = await harness.door(
        "openai", target("local", DEAD_URL), target("engine", wrong_shape_url)
    )

    status, body = await get_json(ollama_door, "/api/tags")
    assert status == 502 and isinstance(body["error"], str)
    response = await openai_door.get("/v1/models")
    assert response.status == 502
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "bad_gateway"


async def test_oversized_answers_are_left_out_declared_or_streamed(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listing, "MAX_LIST_BYTES", 4096)
    padded = {"models": [tag("huge:1", padding="x" * 8192)]}

    declared_url, _ = await harness.stand_in(json_answer(padded))
    chunked_url = await harness.serve(_chunked_app(b'{"models": [' + b" " * 8192 + b"]}"))
    local_url = await harness.ollama("llama3")
    door = await harness.door(
        "ollama",
        target("local", local_url),
        target("engine", declared_url),
        target("peer", chunked_url),
    )

    status, body = await get_json(door, "/api/tags")

    assert status == 200
    assert [entry["name"] for entry in body["models"]] == ["llama3:latest"]
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "declares" in warned and "grew past the 4096-byte limit" in warned


def _chunked_app(body: bytes) -> web.Application:
    """A peer that streams ``body`` in 1 KiB chunks without declaring its length."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 1024):
            await response.write(body[start : start + 1024])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get(f"{RELAY_PREFIX}/ollama/api/tags", handle, allow_head=False)
    return app


async def test_no_target_and_empty_lists_answer_empty_arrays(harness: Harness) -> None:
    lonely_ollama = await harness.door("ollama")
    lonely_openai = await harness.door("openai")
    assert await get_json(lonely_ollama, "/api/tags") == (200, {"models": []})
    assert await get_json(lonely_openai, "/v1/models") == (200, {"object": "list", "data": []})

    empty_ollama = await harness.door("ollama", target("local", await harness.ollama()))
    empty_lmstudio = await harness.door("openai", target("local", await harness.lmstudio()))
    assert await get_json(empty_ollama, "/api/tags") == (200, {"models": []})
    assert await get_json(empty_ollama, "/v1/models") == (200, {"object": "list", "data": []})
    assert await get_json(empty_lmstudio, "/v1/models") == (200, {"object": "list", "data": []})


async def test_credentials_reach_only_this_node_s_engine(harness: Harness) -> None:
    recorded = json_answer({"models": [tag("llama3")]})
    local_url, local = await harness.stand_in(recorded)
    peer_url, peer = await harness.stand_in(recorded)
    engine_url, engine = await harness.stand_in(recorded)
    door = await harness.door(
        "ollama",
        target("local", local_url),
        target("peer", peer_url),
        target("engine", engine_url),
    )

    headers = {**SECRET_HEADERS, "X-Client": "kept", "Connection": "keep-alive"}
    status, _ = await get_json(door, "/api/tags?verbose=1", headers=headers)

    assert status == 200
    (local_path, local_headers), (peer_path, peer_headers), (_, engine_headers) = (
        local.seen[0],
        peer.seen[0],
        engine.seen[0],
    )
    assert (local_path, peer_path) == (
        "/api/tags?verbose=1",
        f"{RELAY_PREFIX}/ollama/api/tags?verbose=1",
    )
    assert local_headers["Authorization"] == "Bearer local-secret"
    assert local_headers["Cookie"] == "session=1"
    for forwarded in (local_headers, peer_headers, engine_headers):
        assert forwarded["X-Client"] == "kept"
    for remote in (peer_headers, engine_headers):
        assert "Authorization" not in remote and "Cookie" not in remote


def test_a_one_model_engine_lists_the_rest_of_its_store_after_the_model_it_holds() -> None:
    held = msgspec.Raw(
        b'{"id":"tiny","object":"model","created":5,"owned_by":"llamacpp","meta":{}}'
    )
    entries = listing.with_stored("llamacpp", [held], ["other", "tiny"])
    assert entries[0] is held, "the engine's own entry passes through unchanged"
    assert [msgspec.json.decode(entry)["id"] for entry in entries] == ["tiny", "other"]
    assert msgspec.json.decode(entries[1])["owned_by"] == "llamacpp"
