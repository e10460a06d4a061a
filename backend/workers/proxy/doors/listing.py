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
while LM Studio's ``Llama-3`` and ``llama-3`` stay two (LM Studio tells them apart). Models whose
weights have the same digest (``RouteTarget.digests``) are one model whatever their names: listed
once, where the first of them would be, by the entry of the door's own engine family when one
lists it, else of the first engine in ``ENGINE_ORDER``, else the first name. Any of its names,
or an alias of it, finds it at ``/v1/models/{id}`` (``routing/identity.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import aiohttp
import msgspec
from aiohttp import web

from backend.protocol.proxy import DOOR_ENGINES, ProxyTargets, RouteTarget
from backend.workers.proxy.doors.engine_models import synthesized_list
from backend.workers.proxy.doors.list_fetch import ListKind, Skipped, get_decoded
from backend.workers.proxy.doors.missing import away_answer
from backend.workers.proxy.doors.show import show_model
from backend.workers.proxy.doors.wire import error_body
from backend.workers.proxy.routing.candidates import ENGINE_ORDER, engine_targets, upstream_url
from backend.workers.proxy.routing.identity import digest_of, names_of
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
# One engine's answer: the target that gave it and its entries.
Answer = tuple[RouteTarget, list[msgspec.Raw]]


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
    table = context.router.table
    found = _find(merged, model_id, table) if merged is not None else None
    if found is not None:
        return web.Response(body=bytes(found), content_type=_CONTENT_TYPE)
    away = away_answer(table, model_id, "/v1/models")
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


def merge(kind: ListKind, answers: Sequence[Answer], door_engine: str = "") -> list[Listed]:
    """Each model once (see the module's docstring), the earliest answer's entry kept (for
    replicas, ``door_engine``'s where it lists one); ``answers`` in routing order."""
    found = _entries_of(kind, answers)
    chosen = _replicas_chosen(found, door_engine)
    seen = _Seen()
    merged: list[Listed] = []
    for entry in found:
        digest = entry.digest
        if digest is None:
            if not seen.listed(entry):
                seen.note(entry)
                merged.append((entry.engine, entry.raw))
            continue
        if digest in seen.digests:
            continue
        seen.digests.add(digest)
        best, replicas = chosen[digest]
        if not seen.listed(best):
            merged.append((best.engine, best.raw))
        for replica in replicas:
            seen.note(replica)
    return merged


class _Entry(msgspec.Struct, frozen=True):
    """One engine's entry: its engine, its name (normalized by the engine's rule), its
    weights' digest where the target knows it, and the entry as the engine sent it."""

    engine: str
    name: str
    digest: str | None
    raw: msgspec.Raw


def _entries_of(kind: ListKind, answers: Sequence[Answer]) -> list[_Entry]:
    found: list[_Entry] = []
    for target, entries in answers:
        for entry in entries:
            identity = _identity(kind, entry)
            if identity is None:
                log.warning("model list entry without a usable identity left out: %.200r", entry)
                continue
            digest = digest_of(target, identity)
            found.append(_Entry(target.engine, normalize(target.engine, identity), digest, entry))
    return found


def _replicas_chosen(
    found: Sequence[_Entry], door_engine: str
) -> Mapping[str, tuple[_Entry, list[_Entry]]]:
    """Per digest, the entry that lists it (the door's engine's, else by ``ENGINE_ORDER``,
    else the first name; the earliest of equals) and every entry that carries it."""

    def rank(entry: _Entry) -> tuple[int, int, str]:
        order = ENGINE_ORDER.index(entry.engine) if entry.engine in ENGINE_ORDER else 99
        return (0 if entry.engine == door_engine else 1, order, entry.name)

    chosen: dict[str, tuple[_Entry, list[_Entry]]] = {}
    for entry in found:
        if entry.digest is None:
            continue
        kept = chosen.get(entry.digest)
        if kept is None:
            chosen[entry.digest] = (entry, [entry])
            continue
        kept[1].append(entry)
        if rank(entry) < rank(kept[0]):
            chosen[entry.digest] = (entry, kept[1])
    return chosen


class _Seen:
    """The names listed so far (per engine, and by the key two engines are compared by),
    and the digests."""

    def __init__(self) -> None:
        self.exact: set[tuple[str, str]] = set()
        self.engines_of: dict[str, set[str]] = {}
        self.digests: set[str] = set()

    def listed(self, entry: _Entry) -> bool:
        """Whether ``entry``'s name is a model already listed."""
        if (entry.engine, entry.name) in self.exact:
            return True
        return bool(self.engines_of.get(same_listing(entry.name), set()) - {entry.engine})

    def note(self, entry: _Entry) -> None:
        self.exact.add((entry.engine, entry.name))
        self.engines_of.setdefault(same_listing(entry.name), set()).add(entry.engine)


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
        (target, entries)
        for target, task in zip(targets, tasks, strict=True)
        if (entries := task.result()) is not None
    ]
    if not answers:
        return None
    return merge(kind, answers, DOOR_ENGINES[context.door])


def _find(merged: list[Listed], model_id: str, table: ProxyTargets) -> msgspec.Raw | None:
    """The entry named ``model_id``: by its engine's own rule first, else by the shared key,
    else any entry of the model it means (a replica's name, an alias), answered under
    ``model_id``."""
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
    return loose if loose is not None else _replica(merged, model_id, table)


def _replica(merged: list[Listed], model_id: str, table: ProxyTargets) -> msgspec.Raw | None:
    names = names_of(table, model_id)
    for engine, entry in merged:
        identity = _identity("models", entry)
        if identity is not None and (engine, normalize(engine, identity)) in names:
            renamed = msgspec.json.decode(entry)
            if isinstance(renamed, dict):
                renamed["id"] = model_id
                return msgspec.Raw(_encoder.encode(renamed))
            return entry
    return None


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
