"""Requests a door answers itself once it knows their model are jobs too: 404 (no node has
the model), 503 (the node that has it is away). Each is a job that was queued and failed with
the door's message, so the client's failure shows where the user looks for it. A flood of
them is bounded: at most ``REFUSED_JOBS_PER_SECOND`` such jobs a second; the rest are counted
and the count logged when the next second's first refusal comes. (The 503 of a model whose
every owner just answered busy stays job-free: it sheds load, and the attempts that met the
busy owners are failed jobs already.)"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from backend.protocol.proxy import ProxyTargets
from backend.protocol.types.base import EngineName, NodeId
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.doors.clients import job_client
from backend.workers.proxy.doors.missing import missing_model
from backend.workers.proxy.routing.candidates import away_owner
from backend.workers.proxy.routing.replies import away_reply

log = logging.getLogger(__name__)

REFUSED_JOBS_PER_SECOND = 20


class RefusedJobs:
    """Makes the jobs of refused requests, at most ``per_second`` in each second of
    ``monotonic``; ``unlisted`` counts the refusals of the current second left out."""

    def __init__(
        self,
        jobs: JobLog,
        monotonic: Callable[[], float],
        per_second: int = REFUSED_JOBS_PER_SECOND,
    ) -> None:
        self._jobs = jobs
        self._monotonic = monotonic
        self._per_second = per_second
        self._second_began = float("-inf")
        self._listed = 0
        self.unlisted = 0

    def record(
        self,
        request: web.Request,
        table: ProxyTargets,
        model: str,
        message: str,
        engine: str = "",
    ) -> None:
        """A failed job for ``request``, refused with ``message`` (unless the bound is
        reached this second)."""
        if not self._admit():
            return
        job = self._jobs.new(
            origin=NodeId(table.node_id),
            engine=EngineName(engine),
            model=model,
            path=request.path,
            client=job_client(request, table),
        )
        job.refused(message)

    def _admit(self) -> bool:
        now = self._monotonic()
        if now - self._second_began >= 1.0:
            if self.unlisted:
                log.info("%d refused requests in a second were not listed as jobs", self.unlisted)
            self._second_began, self._listed, self.unlisted = now, 0, 0
        if self._listed >= self._per_second:
            self.unlisted += 1
            return False
        self._listed += 1
        return True


def refuse_missing(
    refused: RefusedJobs, request: web.Request, table: ProxyTargets, model: str
) -> web.Response:
    """The door's answer for a model no node has now (503 naming the node bringing it back,
    else 404), recorded as a failed job."""
    away = away_owner(table, model)
    if away is not None:
        reply = away_reply(away, model)
        refused.record(request, table, model, reply.message)
        return reply.response(request.path)
    refused.record(request, table, model, f"model '{model}' not found")
    return missing_model(model, request.path)
