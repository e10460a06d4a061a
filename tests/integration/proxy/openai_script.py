"""An OpenAI-speaking engine whose answers the test scripts: text, a tool call, a cut stream.

Real sockets and real HTTP, answering ``/v1/chat/completions`` as llama-server does (SSE chunks,
a finish chunk, a usage chunk, ``data: [DONE]``); it records each request body it received, so
a test sees what a translated request became.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.support.scripted_server import ScriptedServer

Reply = Literal["text", "tool", "cut"]
MODEL = "scripted"
WORDS = ("Hello", " from", " the", " engine")
TOOL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


@dataclass
class OpenAiScript(ScriptedServer):
    """``reply`` decides every chat answer; ``received`` holds each request body."""

    reply: Reply = "text"
    received: list[dict[str, Any]] = field(default_factory=list)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append(body)
        if not body.get("stream"):
            return web.json_response(self._whole())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in self._chunks():
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if self.reply == "cut":
            assert request.transport is not None
            request.transport.close()  # the engine dies mid-stream: no finish, no [DONE]
            return response
        usage = {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
        await response.write(b"data: " + json.dumps(_chunk([], usage=usage)).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _whole(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(WORDS)}
        finish = "stop"
        if self.reply == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [_call(TOOL)]}
            finish = "tool_calls"
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
        }

    def _chunks(self) -> list[dict[str, Any]]:
        first = _chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        if self.reply == "tool":
            arguments = TOOL["arguments"]
            head = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": TOOL["name"], "arguments": arguments[:7]},
            }
            tail = {"index": 0, "function": {"arguments": arguments[7:]}}
            deltas: list[dict[str, Any]] = [{"tool_calls": [head]}, {"tool_calls": [tail]}]
            finish = "tool_calls"
        else:
            deltas = [{"content": word} for word in WORDS]
            finish = "stop"
        chunks = [first, *(_chunk([{"index": 0, "delta": delta}]) for delta in deltas)]
        if self.reply != "cut":
            chunks.append(_chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))
        return chunks


def _call(tool: dict[str, str]) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": dict(tool)}


def _chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk
