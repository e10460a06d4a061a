"""Forward one request to an engine and stream the answer back chunk by chunk.

Nothing is buffered: each upstream chunk is written as it arrives. If the client goes away the
handler is cancelled, which closes the upstream connection, so the engine stops the work and
frees its slot.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from backend.workers.proxy.upstream.answer import Upstream

PROXY_MS_HEADER = "X-PAIR-Proxy-Ms"
# An inference answer names the node whose engine served it (its id) and its job's key.
SERVED_BY_HEADER = "X-PAIR-Served-By"
JOB_KEY_HEADER = "X-PAIR-Job"
STARTED_KEY = web.RequestKey("pair_started", float)
# Set by the gate: the request came from another computer, admitted by its PAIR API key. That
# key is PAIR's, so its Authorization header goes to no engine, not even this computer's.
LAN_CLIENT_KEY = web.RequestKey("pair_lan_client", bool)
# What a client sends to authenticate itself: meant for this computer, never sent off it.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "x-api-key"})
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


def request_headers(request: web.Request, *, credentials: bool = True) -> CIMultiDict[str]:
    """The client's headers minus connection-specific ones, minus its credentials unless
    ``credentials``, and minus the PAIR API key of another computer in any case."""
    dropped = _HOP_BY_HOP if credentials else _HOP_BY_HOP | CREDENTIAL_HEADERS
    if request.get(LAN_CLIENT_KEY, False):
        dropped = dropped | {"authorization", "x-api-key"}
    return CIMultiDict(
        [(name, value) for name, value in request.headers.items() if name.lower() not in dropped]
    )


def without_credentials(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """``headers`` minus the client's credentials (``CREDENTIAL_HEADERS``)."""
    return CIMultiDict(
        (name, value) for name, value in headers.items() if name.lower() not in CREDENTIAL_HEADERS
    )


def response_headers(upstream: Upstream) -> CIMultiDict[str]:
    """The engine's headers minus connection-specific ones and any CORS grant of its own."""
    kept: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.headers.items():
        lowered = name.lower()
        if lowered not in _HOP_BY_HOP and not lowered.startswith("access-control-"):
            kept.add(name, value)
    return kept


async def forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    base_url: str,
    body: bytes | AsyncIterator[bytes] | None,
    path: str | None = None,
    *,
    tls: ssl.SSLContext | bool = True,
    credentials: bool = True,
) -> web.StreamResponse:
    """Send ``request`` (with ``body``) to ``base_url`` and stream the engine's answer back.

    ``path`` (with its query) replaces the request's own, e.g. for a relayed request; ``tls``
    is aiohttp's ``ssl=`` (a peer's pinned client context); ``credentials`` says whether the
    client's credentials go too (only to this computer's own engine).
    """
    url = URL(base_url.rstrip("/") + (path or request.raw_path), encoded=True)
    before_upstream = elapsed_ms(request[STARTED_KEY])
    async with session.request(
        request.method,
        url,
        headers=request_headers(request, credentials=credentials),
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
