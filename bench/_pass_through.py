"""A bare aiohttp pass-through: one HTTP hop and nothing else, the benchmarks' calibration point.

    python bench/_pass_through.py UPSTREAM [--pin BASE64_DER] [--fresh]
    (started by ``_common.PassThrough``; not run by hand)

Listens on a free loopback port and forwards every request to ``UPSTREAM`` + its path over one
pooled client session (``limit=0``, keep-alive), body read whole, answer streamed back chunk by
chunk as it arrives (``iter_any()``, ``Content-Length`` kept when the upstream sent one). Like
PAIR's front door it tries once more, on a new connection, when a pooled one turns out to have
been closed by the upstream (llama-server closes its connection after a stream without saying
so). ``bench/front_door.py`` puts it between its clients and an engine, next to PAIR's door;
``bench/relay_hop.py`` uses it for the hop between nodes. Plain HTTP by default: the relay hop
as it was before pairing (plaintext between front doors). With ``--pin`` it speaks mutual TLS
to the upstream, showing a certificate minted here and trusting only the pinned one, as PAIR's
per-peer client context does; ``--fresh`` opens a new connection (a full handshake) per request
instead of pooling. Once serving it prints one JSON line: ``{"url": URL, "cert": base64 DER of
its certificate}``; stdin EOF stops it. No routing, no jobs: the cost of the transport alone.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import socket
import ssl
import sys

import aiohttp
from _common import ROOT  # noqa: F401 - puts the repository root on sys.path
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from backend.common import tls
from backend.components.identity.certificate import mint
from backend.protocol.types.base import NodeId

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


def _headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict(
        (name, value) for name, value in headers.items() if name.lower() not in _HOP_BY_HOP
    )


async def serve(upstream: str, pin: bytes | None, fresh: bool) -> None:
    credentials = mint(NodeId("bench-pass-through"))
    context: ssl.SSLContext | bool = True
    if pin is not None:
        context = tls.client_context(credentials, pin)
    connector = (
        aiohttp.TCPConnector(limit=0, force_close=True)
        if fresh
        else aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    )
    retry_connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector, auto_decompress=False) as session,
        aiohttp.ClientSession(connector=retry_connector, auto_decompress=False) as retry_session,
    ):

        async def send(request: web.Request, body: bytes) -> aiohttp.ClientResponse:
            async def attempt(via: aiohttp.ClientSession) -> aiohttp.ClientResponse:
                return await via.request(
                    request.method,
                    upstream + request.raw_path,
                    headers=_headers(request.headers),
                    data=body or None,
                    ssl=context,
                )

            try:
                return await attempt(session)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A pooled connection the upstream had closed: one try on a new one, as PAIR does.
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise
                return await attempt(retry_session)

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            async with await send(request, body) as answer:
                response = web.StreamResponse(status=answer.status)
                response.headers.extend(_headers(answer.headers))
                if answer.content_length is not None:
                    response.content_length = answer.content_length
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock)
        await site.start()
        hello = {
            "url": f"http://127.0.0.1:{sock.getsockname()[1]}",
            "cert": base64.b64encode(credentials.cert_der).decode(),
        }
        print(json.dumps(hello), flush=True)
        try:
            await asyncio.to_thread(sys.stdin.read)
        finally:
            await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(prog="_pass_through.py")
    parser.add_argument("upstream")
    parser.add_argument("--pin", default=None, help="base64 DER certificate of the upstream")
    parser.add_argument("--fresh", action="store_true", help="a new connection per request")
    args = parser.parse_args()
    pin = base64.b64decode(args.pin) if args.pin else None
    asyncio.run(serve(args.upstream.rstrip("/"), pin, args.fresh))
    return 0


if __name__ == "__main__":
    sys.exit(main())
