"""The door's answer for a model that no node has, and none is bringing back."""

from __future__ import annotations

from aiohttp import web

from backend.workers.proxy.doors.wire import dialect_for, unknown_model_body


def missing_model(model: str, path: str) -> web.Response:
    """404 in the client API's shape, on every door, whatever engines run or do not."""
    return web.json_response(unknown_model_body(dialect_for(path), model), status=404)
