"""Federated model lists: ``GET /api/tags``, ``GET /api/ps`` (the loaded models) and
``GET /v1/models`` asked of every engine of every node, merged.

Every engine of every node is asked at once; the answers are merged in routing order (this
node first). Ollama's entries (and a peer's, which its relay sends in Ollama's shape whatever
engine it runs) pass through byte for byte (kept as ``msgspec.Raw``), so fields the proxy does
not know survive; only the envelope is rebuilt. Other engines' models are written in Ollama's
shape (``engine_models.py``). An upstream that fails, is too slow, answers too much or answers
something else is left out and logged; only when every one fails is the answer a 502.

Each model is listed once, the first answer's entry kept. Two names are the same model when
one engine lists both and its naming rule (``routing/naming.py``) says so, or when two engines
list them and, each normalized by its own engine's rule, they are equal ignoring case and a
trailing ``:latest``: ``tiny`` from llama-server and ``tiny:latest`` from Ollama are one entry,
while LM Studio's ``Llama-3`` and ``llama-3`` stay two (LM Studio tells them apart).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp
import msgspec
from aiohttp import web

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.doors.engine_models import synthesized_list
from backend.workers.proxy.doors.list_fetch import ListKind, Skipped, get_decoded
from backend.workers.proxy.doors.missing import away_answer
from backend.workers.proxy.doors.show import show_model
from backend.workers.proxy.doors.wire import error_body
from backend.workers.proxy.routing.candidates import engine_targets, upstream_url
from backend.workers.proxy.routing.naming import normalize

if TYPE_CHECKING:
    # Only for annotations: app.py imports this module to route the list paths here.
    from backend.workers.proxy.context import DoorContext

__all__ = [
    "ListKind",
    "engine_list",
    "federated_list",
    "federated_model",
    "local_model_list",
    "merge",
    "same_listing",
    "show_model",
    "with_stored",
]

log = logging.getLogger(__name__)

MAX_LIST_BYTES = 16 * 1024 * 1024
LIST_TIMEOUT_S = 10.0
_CONTENT_TYPE = "application/json"
_KIND_PATHS: dict[ListKind, str] = {"tags": "/api/tags", "ps": "/api/ps", "models": "/v1/models"}
# A listed entry and the engine whose naming rule it follows.
Listed = tuple[str, msgspec.Raw]


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


async def federated_list(
    request: web.Request, context: DoorContext, kind: ListKind
) -> web.StreamResponse:
    """Every model of every engine of every node, merged (502 when none answers)."""
    merged = await _merged(request, context, kind)
    if merged is None:
        return _nobody_answered(context)
    return _json_response(200, _envelope(kind, [entry for _, entry in merged]))


async def federated_model(
    request: web.Request, context: DoorContext, model_id: str
) -> web.StreamResponse:
    """``GET /v1/models/{id}``: that model's entry from the merged list, or 404."""
    merged = await _merged(request, context, "models")
    found = _find(merged, model_id) if merged is not None else None
    if found is not None:
        return web.Response(body=bytes(found), content_type=_CONTENT_TYPE)
    away = away_answer(context.router.table, model_id, "/v1/models")
    if away is not None:
        return away  # the node that lists it is coming back (its list may be what failed)
    if merged is None:
        return _nobody_answered(context)
    message = f"The model `{model_id}` does not exist or is not available on this computer."
    body = error_body(context.dialect, message, kind="not_found_error", code="model_not_found")
    return _json_response(404, body)


async def engine_list(
    request: web.Request, context: DoorContext, local: RouteTarget, kind: ListKind
) -> web.StreamResponse:
    """One engine's own list (what a peer's relay answers): ``tags`` and ``ps`` in Ollama's
    shape whatever the engine, ``models`` in OpenAI's."""
    entries = await _fetch_entries(request, context, local, kind)
    if entries is None:
        return _nobody_answered(context)
    return _json_response(200, _envelope(kind, entries))


async def local_model_list(
    request: web.Request, context: DoorContext, local: RouteTarget, path: str
) -> web.StreamResponse:
    """``GET /v1/models`` of this node's engine alone (``engine_list`` for ``models``)."""
    del path  # the list's path is the kind's own
    return await engine_list(request, context, local, "models")


def same_listing(name: str) -> str:
    """The key two engines' (normalized) names are compared by: no case, no ``:latest``."""
    return name.casefold().removesuffix(":latest")


def merge(kind: ListKind, answers: Sequence[tuple[str, list[msgspec.Raw]]]) -> list[Listed]:
    """Each model once (see the module's docstring), the earliest answer's entry kept;
    ``answers`` are each engine's entries with that engine's name."""
    exact: set[tuple[str, str]] = set()
    engines_of: dict[str, set[str]] = {}
    merged: list[Listed] = []
    for engine, entries in answers:
        for entry in entries:
            identity = _identity(kind, entry)
            if identity is None:
                log.warning("model list entry without a usable identity left out: %.200r", entry)
                continue
            name = normalize(engine, identity)
            listed_by = engines_of.setdefault(same_listing(name), set())
            if (engine, name) in exact or listed_by - {engine}:
                continue
            exact.add((engine, name))
            listed_by.add(engine)
            merged.append((engine, entry))
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


async def _merged(
    request: web.Request, context: DoorContext, kind: ListKind
) -> list[Listed] | None:
    """Every target's entries merged, or None when targets exist and none answered."""
    targets = engine_targets(context.router.table)
    if not targets:
        return []
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                _fetch_entries(request, context, target, kind),
                name=f"model-list {target.engine} {target.node_id}",
            )
            for target in targets
        ]
    answers = [
        (target.engine, entries)
        for target, task in zip(targets, tasks, strict=True)
        if (entries := task.result()) is not None
    ]
    if not answers:
        return None
    return merge(kind, answers)


def _find(merged: list[Listed], model_id: str) -> msgspec.Raw | None:
    """The entry named ``model_id``: by its engine's own rule first, else by the shared key."""
    wanted = same_listing(model_id.strip())
    loose: msgspec.Raw | None = None
    for engine, entry in merged:
        identity = _identity("models", entry)
        if identity is None:
            continue
        name = normalize(engine, identity)
        if name == normalize(engine, model_id):
            return entry
        if loose is None and same_listing(name) == wanted:
            loose = entry
    return loose


def _nobody_answered(context: DoorContext) -> web.Response:
    message = f"no engine answered the model list of the {context.door} front door"
    return _json_response(502, error_body(context.dialect, message, kind="bad_gateway", code=None))


async def _fetch_entries(
    request: web.Request, context: DoorContext, target: RouteTarget, kind: ListKind
) -> list[msgspec.Raw] | None:
    """One upstream's entries, or None (logged) when its answer is left out."""
    query = request.rel_url.raw_query_string
    path = _KIND_PATHS[kind] + (f"?{query}" if query else "")
    try:
        async with asyncio.timeout(LIST_TIMEOUT_S):
            return await _entries(request, context, target, kind, path)
    except Skipped as exc:
        reason = str(exc)
    except TimeoutError:
        reason = f"no answer within {LIST_TIMEOUT_S:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    url = upstream_url(target, path)
    log.warning(
        "%s door: model list from %s (%s) left out: %s", context.door, url, target.node_id, reason
    )
    return None


async def _entries(
    request: web.Request, context: DoorContext, target: RouteTarget, kind: ListKind, path: str
) -> list[msgspec.Raw]:
    limit = MAX_LIST_BYTES
    if kind == "models":
        entries = (await get_decoded(request, context, target, path, _models_decoder, limit)).data
        if target.kind == "local" and target.single_model:
            return with_stored(target.engine, entries or [], target.models)
        return entries or []
    if target.kind == "peer" or target.engine == "ollama":
        return (
            await get_decoded(request, context, target, path, _tags_decoder, limit)
        ).models or []
    return await synthesized_list(request, context, target, kind, limit)


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
