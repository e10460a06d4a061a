"""A job's state as a pure reducer over its numbered events.

In flight until the engine starts it; Running once it holds a slot or output arrives; then
Completed, Failed or Cancelled. A running job goes back to In flight only by failover (a
dispatch with a higher attempt number), and reports from an attempt it left are ignored.
Terminal jobs never change again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec
from msgspec.structs import replace

from backend.protocol.types.base import EngineName, JobKey, NodeId

JobState = Literal["in_flight", "running", "completed", "failed", "cancelled"]
TERMINAL: frozenset[JobState] = frozenset({"completed", "failed", "cancelled"})
INTERRUPTED = "interrupted: PAIR stopped"
# A job's timeline keeps its first event and its latest ones: five failovers with their
# backoffs fit whole; a job retried without end does not grow without bound.
MAX_TIMELINE = 32


class Job(msgspec.Struct, frozen=True):
    """One inference request as the Jobs list shows it."""

    id: JobKey
    engine: EngineName
    model: str
    origin: NodeId
    created_at: float
    state: JobState = "in_flight"
    attempt: int = 0
    target: NodeId | None = None
    serving: NodeId | None = None
    started_at: float | None = None
    completed_at: float | None = None
    error: str | None = None
    seq: int = 0
    run_id: str = ""
    path: str = ""
    client: str | None = None  # a LAN API key's name or ``loopback``; None: a member's job
    client_address: str | None = None
    first_token_at: float | None = None  # the serving attempt's first byte to the client
    chunks: int | None = None  # a streamed answer's chunks (about one per token)
    tokens: int | None = None  # as the engine counted them, where the worker read it
    note: str | None = None  # a replica planner's job: why it loaded or unloaded the model
    # The events applied, oldest first: the first one and the latest (``MAX_TIMELINE``).
    timeline: tuple[JobEvent, ...] = ()


# An event that does not say (older workers): the job keeps the engine it has.
NO_ENGINE = EngineName("")


class Submitted(msgspec.Struct, frozen=True):
    """Attempt ``attempt`` was dispatched to ``target`` (None: waiting between attempts)."""

    seq: int
    attempt: int
    target: NodeId | None
    at: float
    engine: EngineName = NO_ENGINE  # the attempt's (a failover may change it)


class Started(msgspec.Struct, frozen=True):
    """The engine on ``node`` started the request (slot held, or first output)."""

    seq: int
    attempt: int
    node: NodeId
    at: float
    engine: EngineName = NO_ENGINE


class Completed(msgspec.Struct, frozen=True):
    """The engine finished the response with its final marker."""

    seq: int
    attempt: int
    at: float
    first_token_at: float | None = None
    chunks: int | None = None
    tokens: int | None = None


class Errored(msgspec.Struct, frozen=True):
    """The job ended without a complete response (``cancelled`` when the client left)."""

    seq: int
    attempt: int
    at: float
    error: str
    cancelled: bool = False
    first_token_at: float | None = None
    chunks: int | None = None
    tokens: int | None = None


JobEvent = Submitted | Started | Completed | Errored


def apply(job: Job, event: JobEvent) -> Job:
    """The job after ``event``; old, duplicate and late events change nothing but ``seq``."""
    if event.seq <= job.seq or job.state in TERMINAL:
        return job
    job = replace(job, seq=event.seq)
    if event.attempt < job.attempt:
        return job  # a report from an attempt the job already left
    timeline = (*job.timeline, event)
    if len(timeline) > MAX_TIMELINE:
        timeline = timeline[:1] + timeline[1 - MAX_TIMELINE :]
    return _applied(replace(job, timeline=timeline), event)


def _applied(job: Job, event: JobEvent) -> Job:
    if isinstance(event, Submitted):
        return _submitted(job, event)
    if isinstance(event, Started):
        started_at = job.started_at if job.state == "running" else event.at
        return replace(
            job,
            state="running",
            serving=event.node,
            target=event.node,
            started_at=started_at,
            engine=event.engine or job.engine,
        )
    job = replace(
        job,
        completed_at=event.at,
        first_token_at=event.first_token_at,
        chunks=event.chunks,
        tokens=event.tokens,
    )
    if isinstance(event, Completed):
        return replace(job, state="completed")
    return replace(job, state="cancelled" if event.cancelled else "failed", error=event.error)


def _submitted(job: Job, event: Submitted) -> Job:
    if event.attempt > job.attempt:  # a new dispatch: failover returns the job to In flight
        # A failover may go to another engine family (every door reaches every engine).
        return replace(
            job,
            state="in_flight",
            attempt=event.attempt,
            target=event.target,
            serving=None,
            started_at=None,
            engine=event.engine or job.engine,
        )
    if job.state == "running":
        return job  # same attempt: a running request never goes back to waiting
    return replace(job, target=event.target, engine=event.engine or job.engine)


def apply_in_order(job: Job, events: Iterable[JobEvent]) -> tuple[Job, list[JobEvent]]:
    """Apply the events that continue ``job.seq`` without a gap; return the ones still waiting."""
    waiting = sorted((e for e in events if e.seq > job.seq), key=lambda e: e.seq)
    while waiting and waiting[0].seq == job.seq + 1:
        job = apply(job, waiting.pop(0))
    return job, waiting


def interrupted(job: Job, at: float, error: str = INTERRUPTED) -> Job:
    """A job left unfinished by a broker or proxy that stopped: it failed, it is not running."""
    if job.state in TERMINAL:
        return job
    return replace(job, state="failed", completed_at=at, error=error)
