"""``POST /api/show`` for a model of any engine, answered in Ollama's shape.

Ollama answers for its own models (forwarded as is); a peer's relay answers for the engine it
runs there (forwarded too); for another engine of this node or one added by address the answer
is made here from what the model is (``engine_models.details_of``). The node is asked under its
own name for the model (a replica's or an alias's target: ``routing/identity.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp
import msgspec
from aiohttp import web

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.doors.details import show_body
from backend.workers.proxy.doors.engine_models import details_of
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.forwarding import forward_or_502
from backend.workers.proxy.doors.list_fetch import Skipped
from backend.workers.proxy.routing.identity import name_on
from backend.workers.proxy.upstream.forward import json_answer

if TYPE_CHECKING:
    from backend.workers.proxy.context import DoorContext

log = logging.getLogger(__name__)

SHOW_PATH = "/api/show"
SHOW_TIMEOUT_S = 10.0
MAX_DETAILS_BYTES = 4 * 1024 * 1024


class _ShowRequest(msgspec.Struct):
    """The model asked about: ``model``, or ``name`` as older Ollama clients send it."""

    model: str | None = None
    name: str | None = None


_show_request = msgspec.json.Decoder(_ShowRequest)
_encoder = msgspec.json.Encoder()


async def show_model(
    request: web.Request, context: DoorContext, target: RouteTarget, body: bytes
) -> web.StreamResponse:
    """Ollama's ``/api/show`` answer for the model named in ``body``, which ``target`` has
    (under that name or another of the model's)."""
    asked = _model_named(body)
    model = asked if asked is None else name_on(context.router.table, target, asked)
    if target.kind == "peer" or target.engine == "ollama":
        if model is not None and model != asked:
            body = _renamed(body, model)
        return await forward_or_502(request, context, target, body, SHOW_PATH)
    if model is None:
        return json_answer(400, {"error": "model is required"})
    try:
        async with asyncio.timeout(SHOW_TIMEOUT_S):
            details = await details_of(request, context, target, model, MAX_DETAILS_BYTES)
    except (Skipped, TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        log.warning("%s: no details of %r from %s: %s", context.door, model, target.base_url, exc)
        message = f"the engine at {target.base_url} did not describe model '{model}'"
        return ErrorReply(502, message, "bad_gateway").response(SHOW_PATH)
    if details is None:
        return json_answer(404, {"error": f"model '{model}' not found"})
    return web.Response(
        body=_encoder.encode(show_body(details)), content_type="application/json", charset="utf-8"
    )


def _renamed(body: bytes, model: str) -> bytes:
    """The show request naming ``model`` (in ``model``, the field Ollama reads first)."""
    asked = msgspec.json.decode(body)
    if not isinstance(asked, dict):
        return body
    asked["model"] = model
    asked.pop("name", None)
    return _encoder.encode(asked)


def _model_named(body: bytes) -> str | None:
    try:
        asked = _show_request.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    for name in (asked.model, asked.name):
        if name and name.strip():
            return name
    return None
