"""The Python floor: the least a Python HTTP pass-through can cost, for ``front_door.py --floor``.

    python bench/_raw_floor.py UPSTREAM      (started by ``_common.PassThrough``; not run by hand)

No web framework: uvloop's event loop and two ``asyncio.Protocol`` classes with httptools'
parsers (llhttp, C). Each client connection gets one upstream connection of its own, opened on
its first request and kept alive; a request's bytes go upstream as they came (after its body's
``model`` is read, as a router would), and the answer's bytes go back as they arrive, the
parser only finding where each answer ends. One more try on a new connection when a kept one
turns out to have been closed by the upstream (llama-server closes after a stream). No routing,
no jobs, no headers rewritten, no back-pressure: not a product, only how low Python can go, to
set beside nginx and PAIR. Prints ``{"url": URL, "cert": ""}`` once serving; stdin EOF stops it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import cast
from urllib.parse import urlsplit

import httptools
import msgspec
import uvloop


class _Upstream(asyncio.Protocol):
    """One kept-alive connection to the engine, owned by one client connection."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answered = False  # a byte of the current answer came
        self.closed = False
        self.retry = False  # a kept connection: one more try if it turns out closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.answered = True
        self.client.send(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client.answer_done(keep=self.parser.should_keep_alive())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client.upstream_lost(self)


class _Client(asyncio.Protocol):
    """One client connection: requests parsed to their end, then sent upstream whole."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.raw: list[bytes] = []
        self.body: list[bytes] = []
        self.pending: bytes | None = None  # the request on its way, for one more try

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.raw.append(data)
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        request, self.raw = b"".join(self.raw), []
        body, self.body = b"".join(self.body), []
        if body:
            msgspec.json.decode(body).get("model")  # what a router reads to choose
        self.pending = request
        asyncio.get_running_loop().create_task(self._forward(request, retry=True))

    async def _forward(self, request: bytes, *, retry: bool) -> None:
        upstream = self.upstream
        if upstream is None or upstream.closed:
            loop = asyncio.get_running_loop()
            _, upstream = await loop.create_connection(
                lambda: _Upstream(self), self.host, self.port
            )
            self.upstream = upstream
            retry = False
        upstream.answered = False
        assert upstream.transport is not None
        upstream.retry = retry
        upstream.transport.write(request)

    def send(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def answer_done(self, *, keep: bool) -> None:
        self.pending = None
        if not keep and self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def upstream_lost(self, upstream: _Upstream) -> None:
        if upstream is not self.upstream:
            return
        self.upstream = None
        request = self.pending
        if request is not None and not upstream.answered and upstream.retry:
            asyncio.get_running_loop().create_task(self._forward(request, retry=False))
        elif request is not None and self.transport is not None:
            self.transport.close()  # cut mid-answer: the client sees it at once

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def serve(upstream: str) -> None:
    parts = urlsplit(upstream)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(host, port), sock=sock)
    print(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}", "cert": ""}), flush=True)
    try:
        await asyncio.to_thread(sys.stdin.read)
    finally:
        server.close()


def main() -> int:
    uvloop.run(serve(sys.argv[1].rstrip("/")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
