"""The proxy worker's job events (``proxy:jobs`` and its journal) read as the reducer's steps."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from backend.components.jobs.state import Completed, Errored, Job, Started, Submitted
from backend.components.jobs.state import JobEvent as Step
from backend.protocol.types.jobs import JobEvent

log = logging.getLogger(__name__)


def parse_report(params: Any) -> tuple[JobEvent, Step] | None:
    """The wire report and the reducer's event for it, or ``None`` (logged) if it is malformed."""
    try:
        report = msgspec.convert(params, JobEvent)
    except msgspec.ValidationError as exc:
        log.warning("proxy:jobs: malformed report dropped: %s", exc)
        return None
    problem = report_problem(report)
    if problem is not None:
        log.warning("proxy:jobs: report for %r dropped: %s", report.key, problem)
        return None
    return report, step_of(report)


def report_problem(report: JobEvent) -> str | None:
    """Why the reducer cannot take ``report``, or None."""
    if not report.key:
        return "empty key"
    if report.seq < 1:
        return f"seq {report.seq} is below 1"
    if report.attempt < 0:
        return f"attempt {report.attempt} is negative"
    if report.kind == "started" and report.node is None:
        return "a started report names no node"
    return None


def step_of(report: JobEvent) -> Step:
    """The reducer's event for a report ``report_problem`` passed."""
    match report.kind:
        case "submitted":
            return Submitted(report.seq, report.attempt, report.target, report.at, report.engine)
        case "started":
            assert report.node is not None  # checked by report_problem
            return Started(report.seq, report.attempt, report.node, report.at, report.engine)
        case "completed":
            return Completed(report.seq, report.attempt, report.at, *_measured(report))
        case "errored":
            error = report.error or ("cancelled" if report.cancelled else "failed")
            return Errored(
                report.seq, report.attempt, report.at, error, report.cancelled, *_measured(report)
            )


def _measured(report: JobEvent) -> tuple[float | None, int | None, int | None]:
    """What an end says of the answer: first byte, chunks, tokens (negatives are dropped)."""
    chunks = report.chunks if report.chunks is not None and report.chunks > 0 else None
    tokens = report.tokens if report.tokens is not None and report.tokens > 0 else None
    return report.first_token_at, chunks, tokens


def job_from_report(report: JobEvent) -> Job:
    """A job known only from one of its reports (each repeats the job's header)."""
    return Job(
        id=report.key,
        engine=report.engine,
        model=report.model,
        origin=report.origin,
        created_at=report.created_at,
        run_id=report.run_id,
        path=report.path,
        client=report.client,
        client_address=report.client_address,
        note=report.note,
    )
