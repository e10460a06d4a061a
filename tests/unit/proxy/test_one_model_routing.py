"""Each node is sent the request under its own name for the model, through a real door.

Two engines that record the bodies they get: node ``a``'s Ollama lists ``qwen2.5:7b``, node
``b``'s llama-server a GGUF file with the same weights' digest. The table's pins make the order
deterministic; the body is re-encoded only when the node's name differs from the client's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.doors.app import DoorContext, build_app
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.dispatch import Router
from tests.unit.proxy.scripted_door import make_router

QWEN = "sha256:" + "c" * 64
GGUF = "qwen2.5-7b-instruct-q4_k_m.gguf"
_OPENAI_ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "whatever",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


@dataclass
class _Recorder:
    """An engine that keeps each body it is sent and answers at once."""

    bodies: list[bytes] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/chat", self._ollama)
        app.router.add_post("/v1/chat/completions", self._openai)
        return app

    async def _ollama(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        return web.json_response(
            {"model": "x", "message": {"role": "assistant", "content": "hi"}, "done": True}
        )

    async def _openai(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        return web.json_response(_OPENAI_ANSWER)


@dataclass
class _Rig:
    router: Router
    ollama: _Recorder
    llama: _Recorder
    ollama_url: str
    llama_url: str
    doors: dict[str, TestClient[web.Request, web.Application]]

    def table(self, pins: dict[str, str], aliases: dict[str, str] | None = None) -> None:
        a = RouteTarget(
            node_id="a",
            kind="engine",
            base_url=self.ollama_url,
            models=["qwen2.5:7b"],
            digests={"qwen2.5:7b": QWEN},
        )
        b = RouteTarget(
            node_id="b",
            kind="engine",
            base_url=self.llama_url,
            models=[GGUF, "solo.gguf"],
            digests={GGUF: QWEN},
        )
        self.router.update(
            ProxyTargets(
                node_id="me",
                engines={"ollama": [a], "llamacpp": [b]},
                pins=pins,
                aliases=aliases or {},
            )
        )


@pytest.fixture
async def rig() -> AsyncIterator[_Rig]:
    ollama, llama = _Recorder(), _Recorder()
    servers = [TestServer(ollama.app()), TestServer(llama.app())]
    for server in servers:
        await server.start_server()
    session = aiohttp.ClientSession()
    router = make_router(session)
    doors = {
        door: TestClient(TestServer(build_app(DoorContext(door, router, RelayBoard()))))
        for door in ("ollama", "openai")
    }
    for client in doors.values():
        await client.start_server()
    urls = [str(server.make_url("")).rstrip("/") for server in servers]
    try:
        yield _Rig(router, ollama, llama, urls[0], urls[1], doors)
    finally:
        for client in doors.values():
            await client.close()
        await router.close()
        await session.close()
        for server in servers:
            await server.close()


async def test_a_node_that_lists_the_name_as_asked_gets_the_clients_bytes(rig: _Rig) -> None:
    rig.table(pins={"ollama": "a"})
    body = b'{"model":  "qwen2.5:7b", "messages": [], "stream": false}'
    answer = await rig.doors["ollama"].post("/api/chat", data=body)
    assert answer.status == 200
    assert rig.ollama.bodies == [body], "passed through byte for byte"


async def test_a_replica_under_another_name_gets_its_own_name(rig: _Rig) -> None:
    rig.table(pins={"llamacpp": "b"})
    body = b'{"model": "qwen2.5:7b", "messages": [], "stream": false, "seed": 7}'
    answer = await rig.doors["openai"].post("/v1/chat/completions", data=body)
    assert answer.status == 200
    sent = json.loads(rig.llama.bodies[0])
    assert sent == {"model": GGUF, "messages": [], "stream": False, "seed": 7}
    assert rig.ollama.bodies == []


async def test_a_translated_request_carries_the_targets_name(rig: _Rig) -> None:
    rig.table(pins={"llamacpp": "b"}, aliases={"coder": "qwen2.5:7b"})
    chat = {"model": "coder", "messages": [{"role": "user", "content": "x"}], "stream": False}
    answer = await rig.doors["ollama"].post("/api/chat", json=chat)
    assert answer.status == 200, await answer.text()
    assert json.loads(rig.llama.bodies[0])["model"] == GGUF
    assert (await answer.json())["message"]["content"] == "hi"


async def test_an_alias_of_a_model_without_a_digest_reaches_it_by_its_name(rig: _Rig) -> None:
    rig.table(pins={}, aliases={"one": "solo.gguf"})
    body = {"model": "one", "messages": [], "stream": False}
    answer = await rig.doors["openai"].post("/v1/chat/completions", json=body)
    assert answer.status == 200
    assert json.loads(rig.llama.bodies[0])["model"] == "solo.gguf"
