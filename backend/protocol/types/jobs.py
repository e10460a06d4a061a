"""Jobs: the proxy worker's job events and the jobs list (``jobs:*``)."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from backend.protocol.types.base import EngineName, JobKey, NodeId, Wire

JobState = Literal["in_flight", "running", "completed", "failed", "cancelled"]
# How many dispatches a request gets at most (the proxy's ``failover.MAX_DISPATCHES``): what
# "attempt 2 of 5" counts to.
MAX_ATTEMPTS: Final = 5
JobEventKind = Literal["submitted", "started", "completed", "errored"]


class JobEvent(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One numbered event of a job, sent by the proxy worker to its broker (``proxy:jobs``).

    ``key`` is ``<origin node id>/<run id>/<n>``: unique across nodes and proxy restarts.
    Every event repeats the job's header (engine, model, origin, run id, created time) so a
    broker that missed the first one can still show the job. ``seq`` counts from 1 per job.
    ``target`` is where attempt ``attempt`` was sent (None between attempts); ``node`` is the
    node whose engine started it. ``client`` is who asked, at the node it came to: a LAN API
    key's name or ``loopback`` (this computer), from ``client_address``; a member's job served
    here has neither. Times are Unix seconds. A job's end (``completed`` or ``errored``) says
    when the first byte of the serving attempt's answer went to the client
    (``first_token_at``), how many chunks a streamed answer had (``chunks``: about one per
    token with every engine PAIR runs) and the token count the engine reported where the
    worker read it (``tokens``); each is absent where not known, never zero for unknown.
    """

    key: JobKey
    seq: int
    kind: JobEventKind
    attempt: int
    at: float
    engine: EngineName
    model: str
    origin: NodeId
    run_id: str
    created_at: float
    path: str = ""
    client: str | None = None
    client_address: str | None = None
    target: NodeId | None = None
    node: NodeId | None = None
    error: str | None = None
    cancelled: bool = False
    first_token_at: float | None = None
    chunks: int | None = None
    tokens: int | None = None
    # A job the replica planner made (path ``replica:load`` / ``replica:unload``): its reason.
    note: str | None = None


class JobEvents(Wire, frozen=True, kw_only=True):
    """Events of any jobs, in the order they happened (``proxy:jobs``: one per batch)."""

    events: list[JobEvent]


class JobRecord(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One job as ``jobs:*`` and ``pair jobs`` show it (the reducer's state, stored); ``client``
    and ``client_address`` as its events say."""

    key: JobKey
    engine: EngineName
    model: str
    origin: NodeId
    run_id: str
    state: JobState
    created_at: float
    seq: int
    attempt: int = 0
    path: str = ""
    target: NodeId | None = None
    serving: NodeId | None = None
    started_at: float | None = None
    completed_at: float | None = None
    error: str | None = None
    client: str | None = None
    client_address: str | None = None
    first_token_at: float | None = None
    chunks: int | None = None
    tokens: int | None = None
    # A job the replica planner made (path ``replica:load`` / ``replica:unload``): its reason.
    note: str | None = None


class JobStep(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One event of a job's timeline: ``node`` is where a ``submitted`` attempt went (None:
    waiting for the next round) or where a ``started`` one runs; ``seq`` is the event's."""

    seq: int
    kind: JobEventKind
    at: float
    attempt: int
    node: NodeId | None = None
    error: str | None = None
    cancelled: bool = False


class JobDetails(Wire, frozen=True, kw_only=True):
    """Answer to ``jobs:get``: the job and its timeline, oldest first (empty for another
    member's job: its timeline is kept where the job was received)."""

    job: JobRecord
    timeline: list[JobStep]


class JobRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``jobs:get``: the job's key."""

    key: JobKey


class JobsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``jobs:get-initial`` / ``jobs:subscribe``: newest first.

    Apply later ``jobs:event`` pushes whose ``seq`` is greater. ``jobs`` keeps its former wire
    name, ``workloads``, so earlier members and clients still read it.
    """

    seq: int
    jobs: list[JobRecord] = msgspec.field(name="workloads")


class JobUpserted(Wire, frozen=True, kw_only=True, tag_field="event", tag="upsert"):
    """A job appeared or changed: the whole job (``job`` keeps its former wire name,
    ``workload``)."""

    seq: int
    key: JobKey
    job: JobRecord = msgspec.field(name="workload")


class JobRemoved(Wire, frozen=True, kw_only=True, tag_field="event", tag="remove"):
    """A job left the history (cleared or trimmed)."""

    seq: int
    key: JobKey


JobsEvent = JobUpserted | JobRemoved


class JobsQuery(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``jobs:get-initial``: at most ``limit`` jobs, newest first; with
    ``origin``, only the jobs that node received (what a member mirrors)."""

    limit: int = 200
    origin: NodeId | None = None
