"""An Anthropic stream passed through from an engine that left out its ``message_start`` reaches
the client with one put back; a stream that has one passes through byte for byte.

llama-server writes ``message_start`` only with its first token's text; a first token that is
not a whole UTF-8 character sends none, and its stream opens at ``content_block_start``
(``upstream/message_start.py``). The official client then cannot build the message.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import anthropic
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.doors.app import DoorContext, build_app
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.upstream.message_start import lacks_message_start
from tests.support.scripted_server import ScriptedServer
from tests.unit.proxy.scripted_door import make_router

MODEL = "tiny.gguf"
HELLO = [{"role": "user", "content": "hello"}]
SSE = "text/event-stream"


def _event(kind: str, **payload: object) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (
        kind.encode(),
        json.dumps({"type": kind, **payload}).encode(),
    )


START = _event(
    "message_start",
    message={
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 0},
    },
)
BLOCK = _event("content_block_start", index=0, content_block={"type": "text", "text": ""})
# llama-server's first text after a held-back byte token: the replacement character, then more.
DELTAS = [
    _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "\ufffdo"}),
    _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "k"}),
]
END = (
    _event("content_block_stop", index=0)
    + _event(
        "message_delta",
        delta={"stop_reason": "max_tokens", "stop_sequence": None},
        usage={"output_tokens": 3},
    )
    + _event("message_stop")
)


@dataclass
class _LlamaServer(ScriptedServer):
    """Answers ``/v1/messages`` with ``writes`` as llama-server streams: one write each."""

    writes: list[bytes] = field(default_factory=list)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": SSE})
        await response.prepare(request)
        for chunk in self.writes:
            await response.write(chunk)
        await response.write_eof()
        return response


@contextlib.asynccontextmanager
async def _door(engine: _LlamaServer) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """The llamacpp door in-process, ``engine`` (started here) its one local engine."""
    await engine.start()
    async with aiohttp.ClientSession() as session:
        router = make_router(session)
        target = RouteTarget(node_id="self", kind="local", base_url=engine.url, models=[MODEL])
        router.update(ProxyTargets(node_id="self", engines={"llamacpp": [target]}))
        client = TestClient(TestServer(build_app(DoorContext("llamacpp", router, RelayBoard()))))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()
            await router.close()
            await engine.stop()


async def _streamed(door: TestClient[web.Request, web.Application]) -> bytes:
    body = {"model": MODEL, "max_tokens": 5, "messages": HELLO, "stream": True}
    async with door.post("/v1/messages", json=body) as answer:
        assert answer.status == 200
        return await answer.read()


def _names(body: bytes) -> list[str]:
    return [line[7:] for line in body.decode().splitlines() if line.startswith("event: ")]


async def test_a_stream_opened_past_its_message_start_gets_one_first() -> None:
    engine = _LlamaServer(writes=[BLOCK + DELTAS[0], DELTAS[1], END])
    async with _door(engine) as door:
        body = await _streamed(door)
    assert _names(body) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = json.loads(body.split(b"\n", 2)[1].removeprefix(b"data: "))
    assert start["message"]["model"] == MODEL and start["message"]["id"].startswith("msg_")
    assert body.endswith(BLOCK + DELTAS[0] + DELTAS[1] + END), "the engine's bytes follow as sent"


async def test_the_official_client_builds_the_message_from_such_a_stream() -> None:
    engine = _LlamaServer(writes=[BLOCK + DELTAS[0], DELTAS[1], END])
    async with _door(engine) as door:
        client = anthropic.AsyncAnthropic(base_url=str(door.make_url("")), api_key="x")
        try:
            async with client.messages.stream(model=MODEL, max_tokens=5, messages=HELLO) as stream:
                final = await stream.get_final_message()
        finally:
            await client.close()
    assert final.stop_reason == "max_tokens" and final.model == MODEL
    assert [block.text for block in final.content if block.type == "text"] == ["\ufffdok"]


async def test_a_stream_with_its_message_start_passes_through_unchanged() -> None:
    writes = [START + BLOCK + DELTAS[0], DELTAS[1], END]
    async with _door(_LlamaServer(writes=writes)) as door:
        body = await _streamed(door)
    assert body == b"".join(writes)


@pytest.mark.parametrize(
    ("path", "content_type", "first", "lacks"),
    [
        ("/v1/messages", SSE, BLOCK, True),
        ("/v1/messages", SSE, DELTAS[0], True),
        ("/v1/messages", SSE, b"event:message_delta\r\ndata: {}\r\n\r\n", True),
        ("/v1/messages", SSE, START + BLOCK, False),
        ("/v1/messages", SSE, _event("ping") + BLOCK, False),  # ping may come first
        ("/v1/messages", SSE, _event("error", error={}), False),
        ("/v1/messages", "application/json", BLOCK, False),
        ("/v1/chat/completions", SSE, BLOCK, False),
        ("/v1/messages", SSE, b"event: content_bl", False),  # cut short: nothing to tell by
    ],
)
def test_only_an_anthropic_stream_opened_past_its_start_lacks_one(
    path: str, content_type: str, first: bytes, lacks: bool
) -> None:
    assert lacks_message_start(path, content_type, first) is lacks
