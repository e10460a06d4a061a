"""The answer of a request that no round of the dispatch loop will serve."""

from __future__ import annotations

from aiohttp import web

from backend.protocol.proxy import ProxyTargets
from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.missing import missing_model
from backend.workers.proxy.routing import failover
from backend.workers.proxy.routing.candidates import away_owner
from backend.workers.proxy.routing.replies import away_reply, give_up_reply


def final_reply(
    table: ProxyTargets,
    job: Job,
    model: str,
    state: failover.Failover,
    end: failover.Vanished | failover.GiveUp | failover.Away,
    now: float,
) -> web.StreamResponse:
    """The answer of a request no round will serve (``end`` says why), its job failed."""
    away = away_owner(table, model)
    if isinstance(end, failover.Away) and away is not None:
        waited = away_reply(away, model)
        job.failed(waited.message)
        return waited.response(job.path)
    if not isinstance(end, failover.Vanished):
        return give_up_reply(job, failover.final_answer(state, now))
    reply = missing_model(model, job.path)
    job.failed(f"model '{model}' is no longer on any node")
    return reply
