"""A request sent once to one node's engine (or a peer's relay), its answer streamed back."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.relay.peer_tls import NoIdentity
from backend.workers.proxy.routing.candidates import upstream_url
from backend.workers.proxy.upstream.forward import forward

if TYPE_CHECKING:
    from backend.workers.proxy.context import DoorContext

log = logging.getLogger(__name__)


async def forward_or_502(
    request: web.Request,
    context: DoorContext,
    target: RouteTarget,
    body: bytes | AsyncIterator[bytes] | None,
    path: str | None = None,
) -> web.StreamResponse:
    """Send the request to ``target`` once and stream its answer; 502 if it cannot be reached."""
    relative = path or request.raw_path
    url = upstream_url(target, relative)
    base = url[: len(url) - len(relative)]
    try:
        tls = context.router.peer_tls.client_tls(target)
        # The client's credentials are meant for this computer: its own engine gets them, a
        # peer (it trusts us by mutual TLS) or an engine added by address does not. Engine
        # entries have no key of their own to send instead.
        credentials = target.kind == "local"
        return await forward(
            request, context.session, base, body, relative, tls=tls, credentials=credentials
        )
    except (aiohttp.ClientConnectorError, NoIdentity) as exc:
        log.warning("%s door: %s unreachable: %s", context.door, target.base_url, exc)
        message = f"the engine at {target.base_url} is unreachable"
        return ErrorReply(502, message, "bad_gateway").response(request.path)
