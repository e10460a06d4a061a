"""Bounded GETs of what engines say about their models (lists, ``/props``), decoded.

An answer that fails, is too long or has the wrong shape raises ``Skipped`` (the message says
why): the caller leaves it out and logs it. A peer is asked at its relay, over its pinned
mutual-TLS connection pool like its inference requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeVar

import aiohttp
import msgspec
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.relay.peer_tls import ClientTls
from backend.workers.proxy.routing.candidates import upstream_url
from backend.workers.proxy.upstream.forward import request_headers

if TYPE_CHECKING:
    from backend.workers.proxy.context import DoorContext

ListKind = Literal["tags", "ps", "models"]  # "ps" has the shape of "tags"
# Credentials meant for this node never travel to another machine. Accept-Encoding is dropped
# because the proxy builds its own body; aiohttp asks for the encodings it can decode.
_LOCAL_ONLY_HEADERS = frozenset({"authorization", "cookie", "x-api-key"})
_NOT_FORWARDED = frozenset({"accept-encoding"})
_T = TypeVar("_T")


class Skipped(Exception):
    """One upstream's answer is left out (the message says why)."""


def fan_out_headers(request: web.Request, target: RouteTarget) -> CIMultiDict[str]:
    """The client's headers for one upstream: no hop-by-hop ones, no credentials off this node."""
    dropped = _NOT_FORWARDED if target.kind == "local" else _NOT_FORWARDED | _LOCAL_ONLY_HEADERS
    return CIMultiDict(
        (name, value)
        for name, value in request_headers(request).items()
        if name.lower() not in dropped
    )


async def get_decoded(
    request: web.Request,
    context: DoorContext,
    target: RouteTarget,
    path: str,
    decoder: msgspec.json.Decoder[_T],
    limit: int,
) -> _T:
    """``GET path`` of ``target``'s engine, at most ``limit`` bytes, decoded by ``decoder``."""
    url = upstream_url(target, path)
    tls = context.router.peer_tls.client_tls(target)
    body = await get_capped(context.session, url, fan_out_headers(request, target), tls, limit)
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise Skipped(f"not the expected answer: {exc}") from None
    except msgspec.DecodeError:
        raise Skipped("the answer is not valid JSON") from None


async def get_capped(
    session: aiohttp.ClientSession,
    url: str,
    headers: CIMultiDict[str],
    tls: ClientTls,
    limit: int,
) -> bytes:
    """The body of a 2xx answer to ``GET url``, at most ``limit`` bytes long."""
    async with session.get(
        URL(url, encoded=True), headers=headers, allow_redirects=False, ssl=tls
    ) as upstream:
        if not 200 <= upstream.status < 300:
            raise Skipped(f"HTTP {upstream.status}")
        if (upstream.content_length or 0) > limit:
            raise Skipped(f"declares {upstream.content_length} bytes, over the {limit}-byte limit")
        parts: list[bytes] = []
        size = 0
        async for chunk in upstream.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise Skipped(f"the answer grew past the {limit}-byte limit")
            parts.append(chunk)
    return b"".join(parts)
