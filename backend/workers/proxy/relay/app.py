"""The relay listener's application: paired computers' requests, served by this node's engines.

It runs only on the relay socket, behind TLS 1.3 that requires a client certificate pinned at
pairing (``peer_tls.py``). The handshake's verdict is not enough on its own: a member removed
after the handshake of a kept-alive connection would keep its connection, so every request's
certificate is checked again against the pins of the latest table (403 otherwise).

``/_pair/relay/<engine>/<path>`` is served by that engine on this node only, as one attempt
(no second hop), translated here where the engine does not speak the path's API. Only
inference, the model lists, ``/api/show`` and token counts are served: an engine's other paths
(pull, delete, slots...) are this computer's owner's, never a member's client's (403);
``/_pair/relay-started`` is the long poll saying when such a request holds a slot here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

from backend.common.tls import peer_certificate
from backend.protocol.proxy import DOOR_ENGINES, DOORS, RouteTarget
from backend.protocol.types.base import NodeId
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import COUNT_TOKENS, INFERENCE_PATHS, admit, forward_or_502
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.listing import ListKind, engine_list, show_model
from backend.workers.proxy.relay.peer_tls import PeerTls
from backend.workers.proxy.relay.serving import (
    REFUSED_HEADER,
    RELAY_STARTED_PATH,
    RelayBoard,
    relay_key,
    started_handler,
)
from backend.workers.proxy.routing.admission import ATTEMPT_HEADER, JOB_HEADER, ORIGIN_HEADER
from backend.workers.proxy.routing.candidates import ENGINE_ORDER, RELAY_PREFIX, local_target
from backend.workers.proxy.upstream.forward import (
    PROXY_MS_HEADER,
    STARTED_KEY,
    body_stream,
    elapsed_ms,
    format_ms,
)

log = logging.getLogger(__name__)

NOT_PAIRED = "this computer is not paired with the one that sent the request"


class RelayContext(msgspec.Struct, frozen=True):
    """What the relay's handlers share: each door's routing state, the board and the pins."""

    doors: Mapping[str, DoorContext]
    board: RelayBoard
    tls: PeerTls

    def context(self) -> DoorContext | None:
        """A door's routing state to serve with (every door shares one router)."""
        return next(iter(self.doors.values()), None)


RELAY_KEY = web.AppKey("relay_context", RelayContext)


def build_relay_app(
    doors: Mapping[str, DoorContext], board: RelayBoard, tls: PeerTls
) -> web.Application:
    """The application of the relay listener (served over ``tls.server_context()``)."""
    app = web.Application(middlewares=[pinned_gate])
    app[RELAY_KEY] = RelayContext(dict(doors), board, tls)
    app.router.add_get(RELAY_STARTED_PATH, _relay_started, allow_head=False)
    app.router.add_route("*", RELAY_PREFIX + "/{engine}/{tail:.*}", _relay)
    return app


@web.middleware
async def pinned_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse (403) a client whose certificate is not one of the current pins; time answers."""
    started = time.perf_counter()
    request[STARTED_KEY] = started
    relay = request.app[RELAY_KEY]
    if relay.tls.is_pinned(peer_certificate(request.transport)):
        response = await handler(request)
    else:
        refusal = ErrorReply(403, NOT_PAIRED, "forbidden", headers={REFUSED_HEADER: "not-paired"})
        response = refusal.response(request.path)
    if not response.prepared:
        response.headers.setdefault(PROXY_MS_HEADER, format_ms(elapsed_ms(started)))
    return response


async def _relay(request: web.Request) -> web.StreamResponse:
    """A peer's request, served by this node's engine only (one attempt, no second hop)."""
    relay = request.app[RELAY_KEY]
    name = request.match_info["engine"]
    prefix = f"{RELAY_PREFIX}/{name}"
    engine = relay_engine(name)
    context = relay.context()
    if engine is None or context is None or not request.raw_path.startswith(prefix + "/"):
        message = f"this node has no engine named {name!r}"
        return ErrorReply(404, message, "not_found_error").response(request.path)
    path = request.raw_path[len(prefix) :]
    api_path = path.split("?", 1)[0]
    local = local_target(context.router.table, engine)
    if local is None:
        message = f"{engine} is not running on this node"
        return ErrorReply(503, message, "service_unavailable").response(api_path)
    if request.method == "GET" and api_path in _LISTS:
        return await engine_list(request, context, local, _LISTS[api_path])
    if request.method == "POST" and api_path == "/api/show":
        admission = await admit(request, context, path)
        if isinstance(admission, web.StreamResponse):
            return admission
        return await show_model(request, context, local, admission.body)
    if request.method == "POST" and api_path == COUNT_TOKENS:
        return await forward_or_502(request, context, local, body_stream(request), path)
    if request.method != "POST" or api_path not in INFERENCE_PATHS:
        message = (
            f"{request.method} {api_path} is not served for another computer: a member's relay "
            "serves inference and model lists only"
        )
        return ErrorReply(403, message, "forbidden").response(api_path)
    return await _relay_inference(request, context, relay.board, local, path)


_LISTS: Mapping[str, ListKind] = {"/api/tags": "tags", "/api/ps": "ps", "/v1/models": "models"}


def relay_engine(name: str) -> str | None:
    """The engine a relay path names: an engine's name, or (as older nodes send) a door's."""
    if name in ENGINE_ORDER:
        return name
    return DOOR_ENGINES.get(name) if name in DOORS else None


async def _relay_inference(
    request: web.Request,
    context: DoorContext,
    board: RelayBoard,
    local: RouteTarget,
    path: str,
) -> web.StreamResponse:
    admission = await admit(request, context, path)
    if isinstance(admission, web.StreamResponse):
        return admission
    peer_key = request.headers.get(JOB_HEADER)
    attempt_text = request.headers.get(ATTEMPT_HEADER, "1")
    origin = request.headers.get(ORIGIN_HEADER)
    admission.origin = NodeId(origin) if origin is not None else None
    admission.attempt = int(attempt_text) if attempt_text.isdigit() else 1
    admission.only = [local]
    if peer_key is not None:
        # One job here per attempt the peer sends us (a later round may come back here).
        admission.job_key = relay_key(peer_key, admission.attempt)
        board.serving(admission.job_key, admission.attempt)
    try:
        return await context.router.route(request, admission)
    except (asyncio.CancelledError, ConnectionResetError):
        if _hung_up(request):  # else this worker is stopping: not the member's doing
            log.info("relay: %s hung up before its answer ended (job %s)", origin, peer_key)
        raise
    finally:
        if admission.job_key is not None:
            board.ended(admission.job_key, admission.attempt)


def _hung_up(request: web.Request) -> bool:
    """Whether the member's connection is gone (a routine event: one line, no traceback)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _relay_started(request: web.Request) -> web.StreamResponse:
    return await started_handler(request, request.app[RELAY_KEY].board)
