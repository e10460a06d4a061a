"""The models of engines that do not speak Ollama's API, as Ollama's list entries, and what
each one is (``details.py``).

llama-server lists the model it holds at ``/v1/models`` (with ``meta``) and describes it at
``/props`` (its file, chat template, modalities); where that file is on this machine its GGUF
header is read too. That costs a request and a file read, so the result is kept per engine
instance and model. LM Studio lists its whole store with details at ``/api/v0/models``; any
other engine is asked its OpenAI ``/v1/models``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import msgspec
from aiohttp import web

from backend.common.gguf import GgufError, GgufInfo, read_file
from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.doors.details import (
    UNKNOWN_TIME,
    LlamaModel,
    LlamaModels,
    LlamaProps,
    LmStudioModels,
    ModelDetails,
    llamacpp_details,
    lmstudio_details,
    sized,
    tag_entry,
)
from backend.workers.proxy.doors.list_fetch import ListKind, Skipped, get_decoded
from backend.workers.proxy.routing.naming import has_model, normalize, same_model

if TYPE_CHECKING:
    from backend.workers.proxy.context import DoorContext

log = logging.getLogger(__name__)

_llama_models = msgspec.json.Decoder(LlamaModels)
_llama_props = msgspec.json.Decoder(LlamaProps)
_lmstudio_models = msgspec.json.Decoder(LmStudioModels)
_encoder = msgspec.json.Encoder()

# Details per (node, engine URL, engine instance, model): a relaunched engine has a new
# instance number. Bounded: it is started over when full (a handful of models in practice).
_DetailsKey = tuple[str, str, int, str]
_CACHE_SIZE = 256
_details_cache: dict[_DetailsKey, ModelDetails] = {}


async def synthesized_list(
    request: web.Request, context: DoorContext, target: RouteTarget, kind: ListKind, limit: int
) -> list[msgspec.Raw]:
    """``target``'s models as Ollama ``/api/tags`` entries (``/api/ps`` ones for ``ps``)."""
    loaded = kind == "ps"
    if target.engine == "lmstudio":
        found = await get_decoded(
            request, context, target, "/api/v0/models", _lmstudio_models, limit
        )
        entries = [
            tag_entry("lmstudio", model.id, lmstudio_details(model), loaded=loaded)
            for model in found.data or []
            if not loaded or model.state == "loaded"
        ]
        return [msgspec.Raw(_encoder.encode(entry)) for entry in entries]
    held = await _openai_models(request, context, target, limit)
    if loaded and target.engine != "llamacpp":
        held = [model for model in held if has_model(target.engine, target.resident, model.id)]
    entries = []
    for model in held:
        details = await _details(request, context, target, model, held, limit)
        entries.append(tag_entry(target.engine, model.id, details, loaded=loaded))
    if not loaded and target.kind == "local" and target.single_model:
        entries += [
            tag_entry(target.engine, name, ModelDetails(), loaded=False)
            for name in _not_listed(target.engine, held, target.models)
        ]
    return [msgspec.Raw(_encoder.encode(entry)) for entry in entries]


async def details_of(
    request: web.Request, context: DoorContext, target: RouteTarget, model: str, limit: int
) -> ModelDetails | None:
    """What ``model`` of ``target``'s engine is, or None when the engine does not have it."""
    if target.engine == "lmstudio":
        found = await get_decoded(
            request, context, target, "/api/v0/models", _lmstudio_models, limit
        )
        entry = next((m for m in found.data or [] if same_model("lmstudio", m.id, model)), None)
        return None if entry is None else lmstudio_details(entry)
    held = await _openai_models(request, context, target, limit)
    match = next((m for m in held if same_model(target.engine, m.id, model)), None)
    if match is not None:
        return await _details(request, context, target, match, held, limit)
    # A one-model engine serves the rest of its store too (it is relaunched for them).
    return ModelDetails() if has_model(target.engine, target.models, model) else None


def forget_details() -> None:
    """Drop every kept detail (tests start from nothing)."""
    _details_cache.clear()


async def _openai_models(
    request: web.Request, context: DoorContext, target: RouteTarget, limit: int
) -> list[LlamaModel]:
    return (
        await get_decoded(request, context, target, "/v1/models", _llama_models, limit)
    ).data or []


def _not_listed(engine: str, held: Sequence[LlamaModel], stored: Sequence[str]) -> list[str]:
    listed = {normalize(engine, model.id) for model in held}
    return [name for name in stored if normalize(engine, name) not in listed]


async def _details(
    request: web.Request,
    context: DoorContext,
    target: RouteTarget,
    model: LlamaModel,
    held: Sequence[LlamaModel],
    limit: int,
) -> ModelDetails:
    """A listed model's details, kept per engine instance once its engine has described it."""
    if target.engine != "llamacpp" or len(held) != 1:
        # Only a llama-server holding one model describes it at /props without being named.
        return llamacpp_details(model.meta, None, None, UNKNOWN_TIME)
    key = (target.node_id, target.base_url, target.instance, model.id)
    kept = _details_cache.get(key)
    if kept is not None:
        return kept
    try:
        props: LlamaProps | None = await get_decoded(
            request, context, target, "/props", _llama_props, limit
        )
    except (Skipped, aiohttp.ClientError, OSError, ValueError) as exc:
        log.info("no /props from %s (%s): %s", target.base_url, target.node_id, exc)
        props = None
    gguf, size, modified = await _local_gguf(target, props)
    details = sized(llamacpp_details(model.meta, props, gguf, modified), size)
    if props is not None:
        if len(_details_cache) >= _CACHE_SIZE:
            _details_cache.clear()
        _details_cache[key] = details
    return details


async def _local_gguf(
    target: RouteTarget, props: LlamaProps | None
) -> tuple[GgufInfo | None, int, str]:
    """The header, size and time of the model file the engine names, when it is on this
    machine: only this node's own engine's paths are this machine's, and a relative one is
    relative to a working folder the worker does not know."""
    if target.kind != "local" or props is None or not props.model_path:
        return None, 0, UNKNOWN_TIME
    path = Path(props.model_path)
    if not path.is_absolute():
        return None, 0, UNKNOWN_TIME
    try:
        return await asyncio.to_thread(_read_gguf, path)
    except (OSError, GgufError) as exc:
        log.info("model file %s left unread: %s", path, exc)
        return None, 0, UNKNOWN_TIME


def _read_gguf(path: Path) -> tuple[GgufInfo, int, str]:
    """Blocking: the header, the file's size and its modification time (RFC 3339)."""
    stat = path.stat()
    when = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.UTC)
    return read_file(path), stat.st_size, when.isoformat()
