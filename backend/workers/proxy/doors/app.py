"""One front door's aiohttp application: the gate, then the routes.

Every door serves every client API (Ollama's, OpenAI's, Anthropic's Messages) for every model
of the cluster, whatever engine has it. Inference routes become jobs and are routed across the
nodes that have the model (translated where the engine does not speak the client's API); model
lists are federated across every engine; anything else goes to one node running the door's own
engine (this one's when it runs). Peers' relayed requests are not served here: only the relay
listener (``relay_app.py``, mutual TLS) takes them.
"""

from __future__ import annotations

import functools
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestPayloadError

from backend.protocol.proxy import DOOR_ENGINES
from backend.workers.proxy.context import CONTEXT_KEY, DoorContext
from backend.workers.proxy.doors.clients import CLIENT_KEY
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.forwarding import forward_or_502
from backend.workers.proxy.doors.gate import LOOPBACK, Refusal, scope_refusal, screen
from backend.workers.proxy.doors.listing import federated_list, federated_model, show_model
from backend.workers.proxy.doors.missing import missing_or_away
from backend.workers.proxy.doors.refused import refuse_missing
from backend.workers.proxy.doors.wire import (
    MAX_BODY_BYTES,
    BadRequest,
    dialect_for,
    read_model,
)
from backend.workers.proxy.routing.admission import Admission
from backend.workers.proxy.routing.candidates import owners, targets_for
from backend.workers.proxy.routing.identity import name_on
from backend.workers.proxy.routing.pins import pinned
from backend.workers.proxy.routing.send import with_model
from backend.workers.proxy.translate.native import speaks
from backend.workers.proxy.upstream.forward import (
    LAN_CLIENT_KEY,
    PROXY_MS_HEADER,
    STARTED_KEY,
    body_stream,
    cors_headers,
    elapsed_ms,
    format_ms,
    json_answer,
)

log = logging.getLogger(__name__)

OPENAI_INFERENCE = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages")
OLLAMA_INFERENCE = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")
INFERENCE_PATHS = OLLAMA_INFERENCE + OPENAI_INFERENCE
# Names a model but is not inference, and only an engine that speaks Messages can answer it:
# sent once to a node that has the model with such an engine, no job.
COUNT_TOKENS = "/v1/messages/count_tokens"
# What Ollama's clients ask to see that a server is there, answered by PAIR when no Ollama runs
# behind the door (the API version is the Ollama API the translation follows).
OLLAMA_GREETING = "Ollama is running"
OLLAMA_API_VERSION = "0.12.0"
# PAIR's own paths (the relay among them) are never passed to an engine from a front door.
PAIR_PATHS = "/_pair/{tail:.*}"

__all__ = [
    "CONTEXT_KEY",
    "DoorContext",
    "admit",
    "build_app",
    "forward_or_502",
    "gate",
    "inference_paths",
]


def inference_paths(context: DoorContext) -> tuple[str, ...]:
    """The routes of a door that are jobs (every door has all of them)."""
    return INFERENCE_PATHS


def build_app(context: DoorContext) -> web.Application:
    """The application serving ``context.door``.

    Every route goes through ``gate``; the catch-all route last means every request has one.
    The gate is bound to each handler rather than installed as a middleware, which would add
    aiohttp's own layer per request as well."""
    app = web.Application()
    app[CONTEXT_KEY] = context
    router = app.router
    for path in INFERENCE_PATHS:
        router.add_post(path, _gated(_inference))
    router.add_post("/api/show", _gated(_show))
    router.add_post(COUNT_TOKENS, _gated(_count_tokens))
    router.add_get("/api/tags", _gated(_tags), allow_head=True)
    router.add_get("/api/ps", _gated(_loaded), allow_head=False)
    router.add_get("/v1/models", _gated(_models), allow_head=False)
    router.add_get("/v1/models/{model_id:.+}", _gated(_model), allow_head=False)
    router.add_route("*", PAIR_PATHS, _gated(_not_here))
    router.add_route("*", "/{tail:.*}", _gated(_pass_through))
    return app


def _gated(handler: Handler) -> Handler:
    return functools.partial(gate, handler=handler)


@web.middleware
async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse what ``gate.refusal`` refuses (401 or 403, in the API's error shape); time and
    CORS-tag the answers. Another computer's key is PAIR's: it is not passed on to engines."""
    started = time.perf_counter()
    request[STARTED_KEY] = started
    peer = request.transport.get_extra_info("peername") if request.transport else None
    peer_address = peer[0] if peer else None
    origin = request.headers.get("Origin")
    context = request.app[CONTEXT_KEY]
    table = context.router.table
    verdict = screen(
        peer_address,
        request.headers.get("Host"),
        origin,
        authorization=request.headers.get("Authorization"),
        api_key=request.headers.get("x-api-key"),
        lan_access=table.lan_access,
        key_hashes=table.api_key_hashes,
        allowed_origins=table.allowed_origins,
    )
    refused = isinstance(verdict, Refusal)
    if isinstance(verdict, Refusal):
        response: web.StreamResponse = _refused(verdict, request.path)
    elif request.method == "OPTIONS" and origin is not None:
        response = _preflight(request)
    else:
        request[CLIENT_KEY] = verdict
        request[LAN_CLIENT_KEY] = verdict != LOOPBACK
        if verdict != LOOPBACK:
            context.key_use.used(verdict)
        response = await handler(request)
    if not response.prepared:
        response.headers.setdefault(PROXY_MS_HEADER, format_ms(elapsed_ms(started)))
        response.headers.update(cors_headers(request) if not refused else {})
    return response


def _refused(refused: Refusal, path: str) -> web.Response:
    # RFC 9110 section 11.6.1: a 401 names the scheme that would be accepted.
    headers = {"WWW-Authenticate": 'Bearer realm="PAIR"'} if refused.status == 401 else {}
    code = "invalid_api_key" if refused.status == 401 else None
    return ErrorReply(refused.status, refused.message, refused.kind, code, headers).response(path)


async def _inference(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT_KEY]
    admission = await admit(request, context, request.raw_path)
    if isinstance(admission, web.StreamResponse):
        return admission
    table = context.router.table
    found = owners(table, admission.model, admission.dialect)
    if not found:
        pin = pinned(table, admission.model, admission.dialect)
        if pin is None:
            return refuse_missing(context.router.refused, request, table, admission.model)
        admission.repin(pin.model, pin.only)
        found = pin.only
    busy = context.router.busy_reply(found)
    if busy is not None:
        return busy.response(request.path)
    return await context.router.route(request, admission)


async def admit(
    request: web.Request, context: DoorContext, path: str
) -> Admission | web.StreamResponse:
    """Read the (capped) body and its model, or the answer refusing it."""
    api_path = path.split("?", 1)[0]
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return _too_large(api_path)
    try:
        body = await _read_capped(request)
    except RequestPayloadError as exc:  # e.g. a gzip body that is not gzip data
        reason = f"invalid request: the body could not be read ({exc})"
        refused = ErrorReply(400, reason, "invalid_request_error").response(api_path)
        refused.force_close()  # the rest of the body is unread: the connection cannot be reused
        return refused
    if body is None:
        return _too_large(api_path)
    try:
        model = read_model(body)
    except BadRequest as exc:
        return ErrorReply(400, str(exc), "invalid_request_error").response(api_path)
    return Admission(context.door, model, body, path, dialect=dialect_for(api_path))


async def _show(request: web.Request) -> web.StreamResponse:
    """``/api/show``: answered by the first node that has the model (this one first), in
    Ollama's shape whatever its engine."""
    context = request.app[CONTEXT_KEY]
    admission = await admit(request, context, request.raw_path)
    if isinstance(admission, web.StreamResponse):
        return admission
    found = owners(context.router.table, admission.model, "ollama")
    if not found:
        return missing_or_away(context.router.table, admission.model, "/api/show")
    return await show_model(request, context, found[0], admission.body)


async def _count_tokens(request: web.Request) -> web.StreamResponse:
    """``/v1/messages/count_tokens``: sent once to a node whose engine can count the model's
    tokens (one that speaks Messages); a clear 400 when only other engines have it."""
    context = request.app[CONTEXT_KEY]
    admission = await admit(request, context, request.raw_path)
    if isinstance(admission, web.StreamResponse):
        return admission
    everywhere = owners(context.router.table, admission.model, "anthropic")
    if not everywhere:
        return missing_or_away(context.router.table, admission.model, COUNT_TOKENS)
    counting = [t for t in everywhere if speaks(t.engine, "anthropic")]
    if not counting:
        engines = ", ".join(sorted({t.engine for t in everywhere}))
        message = (
            f"count_tokens is not available for model '{admission.model}': its engine "
            f"({engines}) cannot count tokens; only llama-server can"
        )
        return ErrorReply(400, message, "invalid_request_error").response(COUNT_TOKENS)
    # Counted under the target's own name for the model (a replica's, an alias's target).
    body = with_model(admission.body, name_on(context.router.table, counting[0], admission.model))
    return await forward_or_502(request, context, counting[0], body)


async def _tags(request: web.Request) -> web.StreamResponse:
    return await federated_list(request, request.app[CONTEXT_KEY], "tags")


async def _loaded(request: web.Request) -> web.StreamResponse:
    return await federated_list(request, request.app[CONTEXT_KEY], "ps")


async def _models(request: web.Request) -> web.StreamResponse:
    return await federated_list(request, request.app[CONTEXT_KEY], "models")


async def _model(request: web.Request) -> web.StreamResponse:
    model_id = request.match_info["model_id"]
    return await federated_model(request, request.app[CONTEXT_KEY], model_id)


async def _pass_through(request: web.Request) -> web.StreamResponse:
    """A path about no model (``/api/version``, ``/api/pull``, ``/slots``...) to this node's
    engine of the door's family, or one added by address. Never to a member: a client's key
    opens this computer's doors, not the engines of the cluster (a member's relay serves only
    inference and model lists). Another computer's key needs the admin scope here, but to
    see that the engine is there."""
    context = request.app[CONTEXT_KEY]
    table = context.router.table
    key_hash = request.get(CLIENT_KEY, LOOPBACK)
    if key_hash != LOOPBACK:
        refused = _scope_refused(request, context, key_hash)
        if refused is not None:
            return refused
    targets = [t for t in targets_for(table, context.door) if t.kind != "peer"]
    if not targets:
        greeting = _ollama_greeting(context, request)
        if greeting is not None:
            return greeting
        engine = DOOR_ENGINES[context.door]
        message = (
            f"{request.path} is {engine}'s own path, and {engine} does not run on this "
            "computer (models of every engine of the cluster are served on every door; "
            "other paths only by this computer's own engines)"
        )
        return ErrorReply(503, message, "service_unavailable").response(request.path)
    return await forward_or_502(request, context, targets[0], body_stream(request))


def _scope_refused(
    request: web.Request, context: DoorContext, key_hash: str
) -> web.Response | None:
    """403 (logged) when the key has not the admin scope the engine's own paths need."""
    key = context.router.table.api_keys.get(key_hash)
    engine = DOOR_ENGINES[context.door]
    refused = scope_refusal(key, request.method, request.path, engine)
    if refused is None:
        return None
    name = key.name if key is not None else ""
    context.key_use.denied(name, request.remote, request.method, request.path)
    # RFC 6750 section 3.1: a valid token without the scope a resource needs.
    challenge = 'Bearer realm="PAIR", error="insufficient_scope", scope="admin"'
    headers = {"WWW-Authenticate": challenge}
    reply = ErrorReply(403, refused.message, refused.kind, "insufficient_scope", headers)
    return reply.response(request.path)


def _ollama_greeting(context: DoorContext, request: web.Request) -> web.Response | None:
    """What Ollama's clients probe before they list models (``/``, ``/api/version``), on the
    Ollama door with no Ollama to ask."""
    if context.door != "ollama" or request.method not in ("GET", "HEAD"):
        return None
    if request.path == "/":
        return web.Response(text=OLLAMA_GREETING)
    if request.path == "/api/version":
        return json_answer(200, {"version": OLLAMA_API_VERSION})
    return None


async def _not_here(request: web.Request) -> web.StreamResponse:
    message = (
        "PAIR's own paths are served only on the relay port, over mutual TLS, to paired computers"
    )
    return ErrorReply(404, message, "not_found_error").response(request.path)


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


def _too_large(path: str) -> web.Response:
    limit = MAX_BODY_BYTES // (1024 * 1024)
    message = f"the request body is larger than {limit} MiB"
    return ErrorReply(413, message, "request_too_large").response(path)


def _preflight(request: web.Request) -> web.Response:
    response = web.Response(status=204)
    response.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
    response.headers["Access-Control-Allow-Headers"] = request.headers.get(
        "Access-Control-Request-Headers", "Content-Type, Authorization"
    )
    return response
