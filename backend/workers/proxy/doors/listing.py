"""Federated model lists: ``GET /api/tags``, ``GET /api/ps`` (the loaded models) and
``GET /v1/models`` asked of every node, merged.

Every target behind the door is asked at once; the answers are merged in routing order (this
node first), each model once by the engine's naming rule, the first node's entry kept. Entries
pass through byte for byte (kept as ``msgspec.Raw``), so fields the proxy does not know survive;
only the envelope is rebuilt. An upstream that fails, is too slow, answers too much or answers
something else is left out and logged; only when every one fails is the answer a 502. A peer
is asked at its relay, over its pinned mutual-TLS connection pool like its inference requests.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Literal

import aiohttp
import msgspec
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from backend.protocol.proxy import DOOR_ENGINES, RouteTarget
from backend.workers.proxy.doors.wire import error_body
from backend.workers.proxy.relay.peer_tls import ClientTls
from backend.workers.proxy.routing.candidates import targets_for, upstream_url
from backend.workers.proxy.routing.naming import normalize
from backend.workers.proxy.upstream.forward import request_headers

if TYPE_CHECKING:
    # Only for annotations: app.py imports this module to route the list paths here.
    from backend.workers.proxy.context import DoorContext

log = logging.getLogger(__name__)

ListKind = Literal["tags", "ps", "models"]  # "ps" has the shape of "tags"
MAX_LIST_BYTES = 16 * 1024 * 1024
LIST_TIMEOUT_S = 10.0
# Credentials meant for this node never travel to another machine. Accept-Encoding is dropped
# because the proxy builds its own body; aiohttp asks for the encodings it can decode.
_LOCAL_ONLY_HEADERS = frozenset({"authorization", "cookie", "x-api-key"})
_NOT_FORWARDED = frozenset({"accept-encoding"})
_CONTENT_TYPE = "application/json"


class _TagsEnvelope(msgspec.Struct):
    """Ollama's ``/api/tags`` answer; ``null`` is read as no models."""

    models: list[msgspec.Raw] | None


class _ModelsEnvelope(msgspec.Struct):
    """The OpenAI ``/v1/models`` answer; Ollama sends ``data: null`` when nothing is installed."""

    data: list[msgspec.Raw] | None


class _TagIdentity(msgspec.Struct):
    model: str | None = None
    name: str | None = None


class _ModelIdentity(msgspec.Struct):
    id: str | None = None


_tags_decoder = msgspec.json.Decoder(_TagsEnvelope)
_models_decoder = msgspec.json.Decoder(_ModelsEnvelope)
_tag_identity = msgspec.json.Decoder(_TagIdentity)
_model_identity = msgspec.json.Decoder(_ModelIdentity)
_encoder = msgspec.json.Encoder()


class _Skipped(Exception):
    """One upstream's answer is left out of the merge (the message says why)."""


async def federated_list(
    request: web.Request, context: DoorContext, kind: ListKind
) -> web.StreamResponse:
    """The door's model list merged from every target behind it (502 when none answers)."""
    merged = await _merged(request, context, kind, request.raw_path)
    if merged is None:
        return _nobody_answered(context)
    return _json_response(200, _envelope(kind, merged))


async def federated_model(
    request: web.Request, context: DoorContext, model_id: str
) -> web.StreamResponse:
    """``GET /v1/models/{id}``: that model's entry from the merged list, or 404.

    With no engine behind the door at all the answer is 503 (retryable), not "no such model".
    """
    if not targets_for(context.router.table, context.door):
        message = f"no engine is running behind the {context.door} front door"
        body = error_body(context.dialect, message, kind="service_unavailable", code=None)
        return _json_response(503, body)
    merged = await _merged(request, context, "models", "/v1/models")
    if merged is None:
        return _nobody_answered(context)
    engine = DOOR_ENGINES[context.door]
    wanted = normalize(engine, model_id)
    for entry in merged:
        identity = _identity("models", entry)
        if identity is not None and normalize(engine, identity) == wanted:
            return web.Response(body=bytes(entry), content_type="application/json")
    message = f"The model `{model_id}` does not exist or is not available on this computer."
    body = error_body(context.dialect, message, kind="not_found_error", code="model_not_found")
    return _json_response(404, body)


async def _merged(
    request: web.Request, context: DoorContext, kind: ListKind, path: str
) -> list[msgspec.Raw] | None:
    """Every target's entries merged, or None when targets exist and none answered."""
    targets = targets_for(context.router.table, context.door)
    if not targets:
        return []
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                _fetch_entries(request, context, target, kind, path),
                name=f"model-list {context.door} {target.node_id}",
            )
            for target in targets
        ]
    answers = [entries for task in tasks if (entries := task.result()) is not None]
    if not answers:
        return None
    return merge(DOOR_ENGINES[context.door], kind, answers)


def _nobody_answered(context: DoorContext) -> web.Response:
    message = f"no engine behind the {context.door} front door answered the model list"
    return _json_response(502, error_body(context.dialect, message, kind="bad_gateway", code=None))


def merge(engine: str, kind: ListKind, answers: list[list[msgspec.Raw]]) -> list[msgspec.Raw]:
    """Each model once, by ``engine``'s naming rule, the earliest answer's entry kept."""
    seen: set[str] = set()
    merged: list[msgspec.Raw] = []
    for entries in answers:
        for entry in entries:
            identity = _identity(kind, entry)
            if identity is None:
                log.warning("model list entry without a usable identity left out: %.200r", entry)
                continue
            key = normalize(engine, identity)
            if key not in seen:
                seen.add(key)
                merged.append(entry)
    return merged


def with_stored(engine: str, entries: list[msgspec.Raw], stored: list[str]) -> list[msgspec.Raw]:
    """A one-model engine lists only the model it holds; the others of its store can be
    served too (its scheduler loads them), so they are listed after it."""
    listed = {normalize(engine, name) for entry in entries if (name := _identity("models", entry))}
    extra = [
        msgspec.Raw(
            _encoder.encode({"id": name, "object": "model", "created": 0, "owned_by": engine})
        )
        for name in stored
        if normalize(engine, name) not in listed
    ]
    return [*entries, *extra]


async def local_model_list(
    request: web.Request, context: DoorContext, local: RouteTarget, path: str
) -> web.StreamResponse:
    """``GET /v1/models`` of this node's engine alone (a peer asks it at the relay)."""
    entries = await _fetch_entries(request, context, local, "models", path)
    if entries is None:
        return _nobody_answered(context)
    return _json_response(200, _envelope("models", entries))


def fan_out_headers(request: web.Request, target: RouteTarget) -> CIMultiDict[str]:
    """The client's headers for one upstream: no hop-by-hop ones, no credentials off this node."""
    dropped = _NOT_FORWARDED if target.kind == "local" else _NOT_FORWARDED | _LOCAL_ONLY_HEADERS
    return CIMultiDict(
        (name, value)
        for name, value in request_headers(request).items()
        if name.lower() not in dropped
    )


async def _fetch_entries(
    request: web.Request, context: DoorContext, target: RouteTarget, kind: ListKind, path: str
) -> list[msgspec.Raw] | None:
    """One upstream's entries, or None (logged) when its answer is left out."""
    url = upstream_url(target, path, context.door)
    try:
        tls = context.router.peer_tls.client_tls(target)
        async with asyncio.timeout(LIST_TIMEOUT_S):
            body = await _get_capped(context.session, url, fan_out_headers(request, target), tls)
        entries = _decode(kind, body)
        if kind == "models" and target.kind == "local" and target.single_model:
            entries = with_stored(DOOR_ENGINES[context.door], entries, target.models)
        return entries
    except _Skipped as exc:
        reason = str(exc)
    except TimeoutError:
        reason = f"no answer within {LIST_TIMEOUT_S:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    log.warning(
        "%s door: model list from %s (%s) left out: %s", context.door, url, target.node_id, reason
    )
    return None


async def _get_capped(
    session: aiohttp.ClientSession, url: str, headers: CIMultiDict[str], tls: ClientTls
) -> bytes:
    """The body of a 2xx answer to ``GET url``, at most ``MAX_LIST_BYTES`` long."""
    async with session.get(
        URL(url, encoded=True), headers=headers, allow_redirects=False, ssl=tls
    ) as upstream:
        if not 200 <= upstream.status < 300:
            raise _Skipped(f"HTTP {upstream.status}")
        if (upstream.content_length or 0) > MAX_LIST_BYTES:
            raise _Skipped(f"declares {upstream.content_length} bytes, over {_limit()}")
        parts: list[bytes] = []
        size = 0
        async for chunk in upstream.content.iter_any():
            size += len(chunk)
            if size > MAX_LIST_BYTES:
                raise _Skipped(f"the answer grew past {_limit()}")
            parts.append(chunk)
    return b"".join(parts)


def _limit() -> str:
    return f"the {MAX_LIST_BYTES}-byte limit"


def _decode(kind: ListKind, body: bytes) -> list[msgspec.Raw]:
    try:
        if kind != "models":
            return _tags_decoder.decode(body).models or []
        return _models_decoder.decode(body).data or []
    except msgspec.ValidationError as exc:
        raise _Skipped(f"not a model list: {exc}") from None
    except msgspec.DecodeError:
        raise _Skipped("the answer is not valid JSON") from None


def _identity(kind: ListKind, entry: msgspec.Raw) -> str | None:
    """The name an entry is deduplicated by, or None when it has none (or is not an object)."""
    try:
        if kind != "models":
            tag = _tag_identity.decode(entry)
            candidates: tuple[str | None, ...] = (tag.model, tag.name)
        else:
            candidates = (_model_identity.decode(entry).id,)
    except msgspec.DecodeError:
        return None
    return next((name for name in candidates if name and name.strip()), None)


def _envelope(kind: ListKind, entries: list[msgspec.Raw]) -> dict[str, object]:
    if kind != "models":
        return {"models": entries}
    return {"object": "list", "data": entries}


def _json_response(status: int, body: object) -> web.Response:
    """An unprepared answer, so the door's gate still adds its timing and CORS headers."""
    return web.Response(
        status=status, body=_encoder.encode(body), content_type=_CONTENT_TYPE, charset="utf-8"
    )
