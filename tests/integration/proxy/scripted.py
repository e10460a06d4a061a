"""An Ollama-shaped engine whose every answer the test decides: ok, busy, hang, cut, slow.

Real sockets and real HTTP; it records each request it received and each one whose client
went away, so tests can see retries, failovers and cancellations from the engine's side.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from backend.devtools.emulators.server import EmulatorServer

Behaviour = Literal["ok", "busy", "error", "hang", "silent", "cut", "flood"]


@dataclass
class ScriptedEngine:
    """``behaviour`` applies to every chat request; ``token_delay`` paces the stream."""

    name: str
    behaviour: Behaviour = "ok"
    tokens: int = 3
    token_delay: float = 0.0
    headers_delay: float = 0.0
    received: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    server: EmulatorServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/chat", self._chat)
        app.router.add_get("/api/tags", self._tags)
        return app

    async def _tags(self, _: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": "m:latest", "model": "m:latest"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tag = str(body.get("tag", len(self.received)))
        self.received.append(tag)
        try:
            return await self._answer(request, body, tag)
        except asyncio.CancelledError:
            self.cancelled.append(tag)
            raise

    async def _answer(
        self, request: web.Request, body: dict[str, object], tag: str
    ) -> web.StreamResponse:
        if self.behaviour == "busy":
            return web.json_response({"error": "server busy"}, status=503)
        if self.behaviour == "error":
            return web.json_response({"error": "engine exploded"}, status=500)
        if self.behaviour == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(self.headers_delay)
        if body.get("stream") is False:
            await asyncio.sleep(self.token_delay * self.tokens)
            self.finished.append(tag)
            return web.json_response(_chunk(self.name, tag, done=True))
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        if self.behaviour == "silent":  # headers at once, then nothing (LM Studio queueing)
            await asyncio.Event().wait()
        if self.behaviour == "flood":  # far more than any socket buffer holds
            line = json.dumps({"model": "m", "pad": "x" * 65536, "done": False}).encode()
            for _ in range(8192):
                await response.write(line + b"\n")
        async for line in self._lines(tag):
            await response.write(line)
        if self.behaviour == "cut":
            assert request.transport is not None
            request.transport.close()  # the engine dies mid-stream: no final line
            return response
        await response.write(json.dumps(_chunk(self.name, tag, done=True)).encode() + b"\n")
        await response.write_eof()
        self.finished.append(tag)
        return response

    async def _lines(self, tag: str) -> AsyncIterator[bytes]:
        for _ in range(self.tokens):
            await asyncio.sleep(self.token_delay)
            yield json.dumps(_chunk(self.name, tag, done=False)).encode() + b"\n"


def _chunk(name: str, tag: str, *, done: bool) -> dict[str, object]:
    chunk: dict[str, object] = {
        "model": "m",
        "message": {"role": "assistant", "content": f"{name}:{tag} "},
        "done": done,
    }
    if done:
        chunk["done_reason"] = "stop"
    return chunk


async def start_engine(engine: ScriptedEngine) -> ScriptedEngine:
    """Serve ``engine`` on a free loopback port."""
    engine.server = EmulatorServer(engine.app())
    await engine.server.start()
    return engine
