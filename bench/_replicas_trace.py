"""The replica benchmark's trace and statistics: one model hot in a burst, the others steady.

Not run by hand (``bench/replicas.py`` uses it). Pure: a trace is drawn from a seed, and the
figures are computed from what the client saw and what the engines recorded, so the same trace
is played with replicas off and on and the two runs compare request for request.

The figure the issue names besides p50/p95: the time from the burst's start to the first hot
request that a node started serving although it did not have the hot model loaded when the
burst began (a replica at work). The emulators record each request's start on their monotonic
clock, which on Linux is the system's, the same as this process's ``time.monotonic``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from _common import median, percentile

HOT = "coder"
STEADY = ("chat", "notes")
MEAN_TOKENS = 200.0
SIGMA = 0.5
TOKEN_RANGE = (16, 800)


@dataclass(frozen=True)
class TraceShape:
    """How the trace is drawn: the steady models' rate, the burst's start, length and rate
    (requests per second, Poisson), and the whole trace's length (seconds)."""

    steady_rate: float = 0.3
    burst_start_s: float = 20.0
    burst_s: float = 60.0
    burst_rate: float = 1.5
    hot_rate: float = 0.1
    duration_s: float = 120.0

    def scaled(self, speedup: float) -> TraceShape:
        """The same trace ``speedup`` times faster (rates up, times down)."""
        return TraceShape(
            self.steady_rate * speedup,
            self.burst_start_s / speedup,
            self.burst_s / speedup,
            self.burst_rate * speedup,
            self.hot_rate * speedup,
            self.duration_s / speedup,
        )


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


def _tokens(chooser: random.Random) -> int:
    mu = math.log(MEAN_TOKENS) - SIGMA**2 / 2
    return min(TOKEN_RANGE[1], max(TOKEN_RANGE[0], round(chooser.lognormvariate(mu, SIGMA))))


def draw_trace(shape: TraceShape, seed: int) -> list[Arrival]:
    """The steady models at ``steady_rate`` each, the hot one at ``hot_rate`` throughout plus
    ``burst_rate`` during the burst; sorted by time."""
    chooser = random.Random(seed)
    trace: list[Arrival] = []
    for model in STEADY:
        for at in _poisson(chooser, shape.steady_rate, 0.0, shape.duration_s):
            trace.append(Arrival(at, model, _tokens(chooser)))
    for at in _poisson(chooser, shape.hot_rate, 0.0, shape.duration_s):
        trace.append(Arrival(at, HOT, _tokens(chooser)))
    burst_end = min(shape.duration_s, shape.burst_start_s + shape.burst_s)
    for at in _poisson(chooser, shape.burst_rate, shape.burst_start_s, burst_end):
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


def first_replica_served(
    started: Mapping[str, Iterable[tuple[str, float]]],
    warm_at_burst: Mapping[str, bool],
    burst_at: float,
) -> float | None:
    """Seconds from the burst's start (``burst_at``, monotonic) to the first hot request a
    node started although the hot model was not loaded there when the burst began.

    ``started``: per node, (model, started_at monotonic) of the requests its engine ran;
    ``warm_at_burst``: per node, whether the hot model was loaded there at the burst's start.
    None when no such request ran (no replica served).
    """
    firsts = [
        at
        for node, records in started.items()
        if not warm_at_burst.get(node, False)
        for model, at in records
        if model == HOT and at >= burst_at
    ]
    return min(firsts) - burst_at if firsts else None
