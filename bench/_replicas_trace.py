"""The replica benchmark's trace and statistics: one model hot in a burst, the others steady.

Not run by hand (``bench/replicas.py`` uses it). Pure: a trace is drawn from a seed, and the
figures are computed from what the client saw and what the engines recorded, so the same trace
is played with replicas off and on and the two runs compare request for request.

The figure the issue names besides p50/p95: the time from the burst's start to the first hot
request served by a replica the planner loaded, read from the door's jobs (``jobs:list``): the
``replica:load`` jobs (target, end) and the requests' ``serving`` node and first token. Job
times are the brokers' wall clock, the same as this process's ``time.time`` (one computer).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from _common import median, percentile

from backend.protocol.types.jobs import JobRecord

HOT = "coder:latest"
STEADY = ("chat:latest", "notes:latest")
MEAN_TOKENS = 20.0  # about a second at the rig's pace
SIGMA = 0.5
TOKEN_RANGE = (4, 80)


@dataclass(frozen=True)
class TraceShape:
    """How the trace is drawn: the steady models' rate (each), the hot model's trickle, the
    burst's start, length and peak rate (requests per second, Poisson), the trace's length (s),
    and how long the burst's rate takes to rise from 0 to its peak (0: a step, all at once)."""

    steady_rate: float = 0.3
    burst_start_s: float = 20.0
    burst_s: float = 40.0
    burst_rate: float = 2.0
    hot_rate: float = 0.1
    duration_s: float = 90.0
    ramp_s: float = 0.0

    @property
    def name(self) -> str:
        """``step`` (the burst at its peak at once) or ``ramp`` (rising over ``ramp_s``)."""
        return "ramp" if self.ramp_s > 0 else "step"

    def burst_rate_at(self, at: float) -> float:
        """The burst's rate (requests per second) at ``at`` seconds from the trace's start."""
        if not self.burst_start_s <= at < self.burst_start_s + self.burst_s:
            return 0.0
        if self.ramp_s <= 0:
            return self.burst_rate
        return self.burst_rate * min(1.0, (at - self.burst_start_s) / self.ramp_s)


QUICK = TraceShape(burst_start_s=10.0, burst_s=25.0, duration_s=45.0)
# Demand that builds up (a team arriving at work): the burst rises to its peak over 30 s (15 s
# quick) and holds there about as long, so the peak still outruns one copy for a while.
RAMP = TraceShape(burst_s=60.0, duration_s=100.0, ramp_s=30.0)
QUICK_RAMP = TraceShape(burst_start_s=10.0, burst_s=32.0, duration_s=50.0, ramp_s=15.0)
SHAPES = {"step": (TraceShape(), QUICK), "ramp": (RAMP, QUICK_RAMP)}


@dataclass(frozen=True)
class Arrival:
    """One request of the trace: when (seconds from the start), which model, how many tokens
    it answers, whether it belongs to the burst."""

    at: float
    model: str
    tokens: int
    burst: bool = False


@dataclass(frozen=True)
class Outcome:
    """What the client saw of one request (seconds; None when it failed)."""

    arrival: Arrival
    latency: float | None = None
    first_token: float | None = None
    error: str | None = None
    served_by: str | None = None


def _poisson(chooser: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Arrival times of a Poisson process at ``rate``/s between ``start`` and ``end``."""
    times: list[float] = []
    at = start
    while rate > 0:
        at += chooser.expovariate(rate)
        if at >= end:
            break
        times.append(at)
    return times


def _thinned(chooser: random.Random, shape: TraceShape, end: float) -> list[float]:
    """Arrival times of the burst's non-homogeneous Poisson process up to ``end``, by thinning:
    candidates at the peak rate, each kept with probability (rate there) / (peak rate)."""
    return [
        at
        for at in _poisson(chooser, shape.burst_rate, shape.burst_start_s, end)
        if chooser.random() * shape.burst_rate < shape.burst_rate_at(at)
    ]


def _tokens(chooser: random.Random) -> int:
    mu = math.log(MEAN_TOKENS) - SIGMA**2 / 2
    return min(TOKEN_RANGE[1], max(TOKEN_RANGE[0], round(chooser.lognormvariate(mu, SIGMA))))


def draw_trace(shape: TraceShape, seed: int) -> list[Arrival]:
    """The steady models at ``steady_rate`` each, the hot one at ``hot_rate`` throughout plus
    the burst's rate during the burst (``burst_rate``, or rising to it over ``ramp_s``); sorted
    by time."""
    chooser = random.Random(seed)
    trace: list[Arrival] = []
    for model in STEADY:
        for at in _poisson(chooser, shape.steady_rate, 0.0, shape.duration_s):
            trace.append(Arrival(at, model, _tokens(chooser)))
    for at in _poisson(chooser, shape.hot_rate, 0.0, shape.duration_s):
        trace.append(Arrival(at, HOT, _tokens(chooser)))
    burst_end = min(shape.duration_s, shape.burst_start_s + shape.burst_s)
    if shape.ramp_s > 0:
        burst = _thinned(chooser, shape, burst_end)
    else:
        burst = _poisson(chooser, shape.burst_rate, shape.burst_start_s, burst_end)
    for at in burst:
        trace.append(Arrival(at, HOT, _tokens(chooser), burst=True))
    trace.sort(key=lambda arrival: (arrival.at, arrival.model))
    return trace


@dataclass(frozen=True)
class Figures:
    """One group of requests (all, the hot model's, the steady ones'): p50 and p95 latency and
    time to first token (seconds), how many answered and failed."""

    count: int
    failed: int
    p50_s: float
    p95_s: float
    first_token_p50_s: float
    first_token_p95_s: float


def figures(outcomes: Iterable[Outcome]) -> Figures:
    """p50/p95 of the latencies and first tokens of ``outcomes`` (NaN when none answered)."""
    chosen = list(outcomes)
    latencies = [o.latency for o in chosen if o.latency is not None]
    firsts = [o.first_token for o in chosen if o.first_token is not None]
    return Figures(
        count=len(chosen),
        failed=sum(1 for o in chosen if o.error is not None),
        p50_s=median(latencies),
        p95_s=percentile(latencies, 0.95),
        first_token_p50_s=median(firsts),
        first_token_p95_s=percentile(firsts, 0.95),
    )


def grouped(outcomes: list[Outcome]) -> dict[str, Figures]:
    """Figures for all requests, the hot model's and the steady models'."""
    return {
        "all": figures(outcomes),
        "hot": figures(o for o in outcomes if o.arrival.model == HOT),
        "steady": figures(o for o in outcomes if o.arrival.model != HOT),
    }


def is_request(job: JobRecord) -> bool:
    """A client's request (not a replica planner's load or unload)."""
    return not job.path.startswith("replica:")


def served_at(job: JobRecord) -> float | None:
    """When ``job`` was being served: its first token (a job's start is its dispatch, which
    for a node loading the model comes before the load), else its end."""
    return job.first_token_at if job.first_token_at is not None else job.completed_at


def planner_loads(jobs: Iterable[JobRecord]) -> list[JobRecord]:
    """The ``replica:load`` jobs among ``jobs``, oldest first."""
    return sorted((j for j in jobs if j.path == "replica:load"), key=lambda j: j.created_at)


def first_replica_served(jobs: list[JobRecord], burst_at: float) -> float | None:
    """Seconds from ``burst_at`` (wall clock) to the first token of the first hot request
    served on a node where the planner loaded the hot model, after that load ended; None if
    none."""
    loads = [j for j in planner_loads(jobs) if j.model == HOT and j.completed_at is not None]
    starts = [
        at
        for job in jobs
        if is_request(job) and job.model == HOT and (at := served_at(job)) is not None
        for load in loads
        if job.serving == load.target and at >= (load.completed_at or 0.0)
    ]
    return min(starts) - burst_at if starts else None


def first_served_elsewhere(jobs: list[JobRecord], door_node: str, burst_at: float) -> float | None:
    """Seconds from ``burst_at`` to the first token of the first hot request of the burst that
    a node other than the door's own served (a second copy at work, whoever loaded it)."""
    starts = [
        at
        for job in jobs
        if is_request(job)
        and job.model == HOT
        and (at := served_at(job)) is not None
        and at >= burst_at
        and job.serving not in (None, door_node)
    ]
    return min(starts) - burst_at if starts else None


def served_counts(outcomes: Iterable[Outcome], model: str) -> dict[str, int]:
    """How many of ``model``'s requests each node served (by the served-by header)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.arrival.model == model and outcome.served_by is not None:
            counts[outcome.served_by] = counts.get(outcome.served_by, 0) + 1
    return counts


def waits_by_node(jobs: Iterable[JobRecord], hot: bool) -> dict[str, tuple[int, float]]:
    """Per serving node, the hot (or steady) requests it served and the p95 of their wait
    from arrival at the door to the first token (seconds, a load included): where the
    requests waited."""
    waits: dict[str, list[float]] = {}
    for job in jobs:
        if is_request(job) and (job.model == HOT) == hot and (at := served_at(job)) is not None:
            waits.setdefault(str(job.serving), []).append(at - job.created_at)
    return {node: (len(found), percentile(found, 0.95)) for node, found in waits.items()}
