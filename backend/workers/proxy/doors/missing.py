"""The door's answer for a model that no node behind it has, and none is bringing back."""

from __future__ import annotations

from aiohttp import web

from backend.protocol.proxy import Door, ProxyTargets
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.wire import dialect_for, unknown_model_body
from backend.workers.proxy.routing.candidates import targets_for


def missing_model(targets: ProxyTargets, door: Door, model: str, path: str) -> web.Response:
    """503 when no engine runs behind ``door`` at all, else 404 in the API's shape."""
    if not targets_for(targets, door):
        message = f"no engine is running behind the {door} front door"
        return ErrorReply(503, message, "service_unavailable").response(path)
    return web.json_response(unknown_model_body(dialect_for(path), model), status=404)
