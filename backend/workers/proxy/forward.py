"""Forward one request to an engine and stream the answer back chunk by chunk.

Nothing is buffered: each upstream chunk is written as it arrives. If the client goes away the
handler is cancelled, which closes the upstream connection, so the engine stops the work and
frees its slot.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

PROXY_MS_HEADER = "X-PAIR-Proxy-Ms"
STARTED_KEY = web.RequestKey("pair_started", float)
# RFC 9110 section 7.6.1 connection-specific fields, plus the ones aiohttp computes itself.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)


def elapsed_ms(since: float) -> float:
    """Milliseconds since ``since`` (a ``time.perf_counter()`` reading)."""
    return (time.perf_counter() - since) * 1000


def format_ms(milliseconds: float) -> str:
    """The ``X-PAIR-Proxy-Ms`` value."""
    return f"{milliseconds:.3f}"


def request_headers(request: web.Request) -> CIMultiDict[str]:
    """The client's headers minus connection-specific ones."""
    return CIMultiDict(
        (name, value) for name, value in request.headers.items() if name.lower() not in _HOP_BY_HOP
    )


def response_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    """The engine's headers minus connection-specific ones and any CORS grant of its own."""
    return CIMultiDict(
        (name, value)
        for name, value in upstream.headers.items()
        if name.lower() not in _HOP_BY_HOP and not name.lower().startswith("access-control-")
    )


async def forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    base_url: str,
    body: bytes | AsyncIterator[bytes] | None,
    path: str | None = None,
    *,
    tls: ssl.SSLContext | bool = True,
) -> web.StreamResponse:
    """Send ``request`` (with ``body``) to ``base_url`` and stream the engine's answer back.

    ``path`` (with its query) replaces the request's own, e.g. for a relayed request; ``tls``
    is aiohttp's ``ssl=`` (a peer's pinned client context).
    """
    url = URL(base_url.rstrip("/") + (path or request.raw_path), encoded=True)
    before_upstream = elapsed_ms(request[STARTED_KEY])
    async with session.request(
        request.method,
        url,
        headers=request_headers(request),
        data=body,
        allow_redirects=False,
        ssl=tls,
    ) as upstream:
        headers_at = time.perf_counter()
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(response_headers(upstream))
        response.headers.extend(cors_headers(request))
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        response.headers[PROXY_MS_HEADER] = format_ms(before_upstream + elapsed_ms(headers_at))
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    return response


def body_stream(request: web.Request) -> AsyncIterator[bytes] | None:
    """The client's body as a stream (for uploads we do not inspect), or None without one."""
    if not request.body_exists:
        return None
    return _chunks(request)


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_any():
        yield chunk


def cors_headers(request: web.Request) -> dict[str, str]:
    """A CORS grant for the request's own Origin (the gate has let only loopback ones through)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return {}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


def json_answer(status: int, body: Any) -> web.Response:
    """A JSON answer made by the proxy itself (the gate adds the timing header)."""
    return web.json_response(body, status=status)
