"""The router's own answers: every owner busy, a member away, a request that gave up, a model
switch failed."""

from __future__ import annotations

import msgspec
from aiohttp import web

from backend.protocol.proxy import AwayModels
from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.wire import dialect_for
from backend.workers.proxy.routing import failover
from backend.workers.proxy.routing.send import reply_headers
from backend.workers.proxy.scheduler.engine_scheduler import LoadFailed
from backend.workers.proxy.upstream.attempt import Failure
from backend.workers.proxy.upstream.stream import openai_error_body


def busy_reply(retry_after: int) -> ErrorReply:
    """503 when every owner has just answered busy."""
    return ErrorReply(
        503,
        "every node that has the requested model is busy; try again shortly",
        "service_unavailable",
        headers={"Retry-After": str(retry_after)},
    )


# A member restarting, or whose link came back, is routable again within seconds.
AWAY_RETRY_AFTER_S = 5


def away_reply(away: AwayModels, model: str) -> ErrorReply:
    """503 for a model only a member has that does not serve it right now (it restarts, or
    cannot be reached): worth trying again, unlike a 404."""
    message = (
        f"model '{model}' is on {away.name or away.node_id}, which cannot serve it right now "
        "(it is restarting or cannot be reached); try again shortly"
    )
    headers = {"Retry-After": str(AWAY_RETRY_AFTER_S)}
    return ErrorReply(503, message, "service_unavailable", headers=headers)


def give_up_reply(job: Job, answer: failover.FinalAnswer) -> web.StreamResponse:
    """The response of a request that gave up (``failover.final_answer``); its job fails."""
    if isinstance(answer, failover.Unreachable):
        reply = ErrorReply(
            503,
            "no node that has the requested model could be reached in time",
            "service_unavailable",
            headers={"Retry-After": "5"},
        )
        job.failed(reply.message)
        return reply.response(job.path)
    if isinstance(answer, failover.BadGateway):
        job.failed(answer.message)
        return ErrorReply(answer.status, answer.message, "bad_gateway").response(job.path)
    return _relayed(job, answer.failure)


def load_failed(engine: str, model: str, exc: LoadFailed) -> Failure:
    """An engine that could not switch to the model: a 500 for the client."""
    return Failure(
        "status",
        f"{engine} could not load {model}: {exc}",
        status=500,
        body=msgspec.json.encode({"error": f"could not load {model}: {exc}"}),
    )


def _relayed(job: Job, failure: Failure) -> web.StreamResponse:
    """The last node's own error answer, in the door's dialect."""
    assert failure.status is not None
    job.failed(failure.message)
    body = failure.body
    if dialect_for(job.path) == "openai":
        body = openai_error_body(body, failure.status)
    response = web.Response(status=failure.status, body=body)
    if failure.headers is not None:
        response.headers.extend(reply_headers(failure.headers))
    return response
