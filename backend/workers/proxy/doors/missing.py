"""The door's answer for a model that no node has now: 404 when nobody is bringing it back,
503 + ``Retry-After`` naming the node while one that served it is (its engine restarting after
a crash, a member restarting or out of reach: ``ProxyTargets.away``), for every path that names
a model, so a client tries again instead of taking "not found" as final."""

from __future__ import annotations

from aiohttp import web

from backend.protocol.proxy import ProxyTargets
from backend.workers.proxy.doors.wire import dialect_for, unknown_model_body
from backend.workers.proxy.routing.candidates import away_owner
from backend.workers.proxy.routing.replies import away_reply


def missing_model(model: str, path: str) -> web.Response:
    """404 in the client API's shape, on every door, whatever engines run or do not."""
    return web.json_response(unknown_model_body(dialect_for(path), model), status=404)


def away_answer(table: ProxyTargets, model: str, path: str) -> web.Response | None:
    """503 naming the node that is bringing ``model`` back, or None when none is."""
    away = away_owner(table, model)
    return away_reply(away, model).response(path) if away is not None else None


def missing_or_away(table: ProxyTargets, model: str, path: str) -> web.Response:
    """``away_answer`` where a node is bringing ``model`` back, else ``missing_model``."""
    return away_answer(table, model, path) or missing_model(model, path)
