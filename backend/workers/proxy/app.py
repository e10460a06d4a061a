"""One front door's aiohttp application: the gate, the model check, and the forwarding routes."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from backend.components.proxy.gate import refusal
from backend.components.proxy.targets import Door, ProxyTargets, local_target, owners
from backend.components.proxy.wire import (
    MAX_BODY_BYTES,
    BadRequest,
    Dialect,
    error_body,
    read_model,
    unknown_model_body,
)
from backend.workers.proxy.forward import (
    PROXY_MS_HEADER,
    STARTED_KEY,
    body_stream,
    cors_headers,
    elapsed_ms,
    format_ms,
    forward,
    json_answer,
)

log = logging.getLogger(__name__)

OLLAMA_MODEL_PATHS = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show")
OPENAI_MODEL_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
# Answered locally when no engine runs behind the door, so clients see an empty node.
OLLAMA_EMPTY: dict[str, Any] = {"/api/tags": {"models": []}, "/api/ps": {"models": []}}
OPENAI_EMPTY: dict[str, Any] = {"/v1/models": {"object": "list", "data": []}}


@dataclass(frozen=True, slots=True)
class DoorContext:
    """What a door's handlers need: its name, the shared upstream session and the targets."""

    door: Door
    session: aiohttp.ClientSession
    targets: Callable[[], ProxyTargets]

    @property
    def dialect(self) -> Dialect:
        """The error shape clients of this door expect."""
        return "ollama" if self.door == "ollama" else "openai"


CONTEXT_KEY = web.AppKey("door_context", DoorContext)


def build_app(context: DoorContext) -> web.Application:
    """The application serving ``context.door``."""
    app = web.Application(middlewares=[gate])
    app[CONTEXT_KEY] = context
    model_paths = OLLAMA_MODEL_PATHS if context.door == "ollama" else OPENAI_MODEL_PATHS
    for path in model_paths:
        app.router.add_post(path, _model_request)
    empty = OLLAMA_EMPTY if context.door == "ollama" else OPENAI_EMPTY
    for path in empty:
        app.router.add_get(path, _listing, allow_head=False)
    app.router.add_route("*", "/{tail:.*}", _pass_through)
    return app


@web.middleware
async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse non-loopback peers, Hosts and Origins (403); time and CORS-tag local answers."""
    started = time.perf_counter()
    request[STARTED_KEY] = started
    context = request.app[CONTEXT_KEY]
    peer = request.transport.get_extra_info("peername") if request.transport else None
    origin = request.headers.get("Origin")
    reason = refusal(peer[0] if peer else None, request.headers.get("Host"), origin)
    if reason is not None:
        response: web.StreamResponse = _error(context, 403, reason, "forbidden")
    elif request.method == "OPTIONS" and origin is not None:
        response = _preflight(request)
    else:
        response = await handler(request)
    if not response.prepared:
        response.headers.setdefault(PROXY_MS_HEADER, format_ms(elapsed_ms(started)))
        response.headers.update(cors_headers(request) if reason is None else {})
    return response


async def _model_request(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT_KEY]
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return _too_large(context)
    body = await _read_capped(request)
    if body is None:
        return _too_large(context)
    try:
        model = read_model(body)
    except BadRequest as exc:
        return _error(context, 400, str(exc), "invalid_request_error")
    found = owners(context.targets(), context.door, model)
    if not found:
        return json_answer(404, unknown_model_body(context.dialect, model))
    target = found[0]
    return await _forward_or_502(request, context, target.base_url, body)


async def _listing(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT_KEY]
    target = local_target(context.targets(), context.door)
    if target is None:
        empty = OLLAMA_EMPTY if context.door == "ollama" else OPENAI_EMPTY
        return json_answer(200, empty[request.path])
    return await _forward_or_502(request, context, target.base_url, None)


async def _pass_through(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT_KEY]
    target = local_target(context.targets(), context.door)
    if target is None:
        message = f"no engine is running behind the {context.door} front door"
        return _error(context, 503, message, "service_unavailable")
    return await _forward_or_502(request, context, target.base_url, body_stream(request))


async def _forward_or_502(
    request: web.Request,
    context: DoorContext,
    base_url: str,
    body: bytes | AsyncIterator[bytes] | None,
) -> web.StreamResponse:
    try:
        return await forward(request, context.session, base_url, body)
    except aiohttp.ClientConnectorError as exc:
        log.warning("%s door: engine at %s unreachable: %s", context.door, base_url, exc)
        return _error(context, 502, f"the engine at {base_url} is unreachable", "bad_gateway")


async def _read_capped(request: web.Request) -> bytes | None:
    """The whole body, or None once it grows past the cap (the rest is left unread)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _too_large(context: DoorContext) -> web.Response:
    limit = MAX_BODY_BYTES // (1024 * 1024)
    message = f"the request body is larger than {limit} MiB"
    return _error(context, 413, message, "request_too_large")


def _error(context: DoorContext, status: int, message: str, kind: str) -> web.Response:
    return json_answer(status, error_body(context.dialect, message, kind=kind, code=None))


def _preflight(request: web.Request) -> web.Response:
    response = web.Response(status=204)
    response.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
    response.headers["Access-Control-Allow-Headers"] = request.headers.get(
        "Access-Control-Request-Headers", "Content-Type, Authorization"
    )
    return response
