"""What ``bench/front_door.py`` measures, and the plain arithmetic over it: the engines as the
bench sees them, the paths of each row, rounds pooled, added latencies, their ratios and the
intervals of those ratios. No I/O: unit-tested on made-up samples.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from _common import LoadResult, median, percentile

LEVELS = (1, 32, 100)
JSON, STREAM = "json", "stream"
KINDS = (JSON, STREAM)
DIRECT, BARE, NGINX, PAIR = "direct", "bare", "nginx", "PAIR"
# Each row in rounds of its paths back to back, every other round reversed; results pooled.
ROUNDS = 6
PIN_LEVEL = 32
RATIO_TARGET = 1.5  # PAIR's added latency at most this times the bare pass-through's
NGINX_TARGET = 2.0  # ... and at most this times nginx's
CHUNK_TARGET_MS = 1.0  # PAIR's per-chunk added delay p99
# The interval of each ratio: the rounds resampled with replacement (a round's runs kept
# together) this many times; the 2.5th to 97.5th percentile of the ratios found.
RESAMPLES = 400
INTERVAL = (0.025, 0.975)
FRACTIONS = (0.5, 0.99)
QUICK_DIVISOR = 4

Row = dict[str, LoadResult]  # path -> its runs of one row, pooled
Interval = tuple[float, float]


@dataclass(frozen=True)
class Backend:
    """One engine as the benchmark sees it: its label, front door, paths and request bodies.

    ``stream_closes``: the engine closes its connection after each streamed response without
    saying so (llama-server does), so streamed runs open a new connection per request (on every
    path alike) instead of racing that close on a pooled one.
    """

    label: str
    engine: str
    door: str
    plain_path: str
    plain_body: dict[str, Any]
    stream_path: str
    stream_body: dict[str, Any]
    stream_format: str
    requests: dict[int, int]
    stream_closes: bool = False

    def total(self, level: int, quick: bool) -> int:
        """Measured requests per path at concurrency ``level``."""
        full = self.requests[level]
        return max(level, full // QUICK_DIVISOR) if quick else full

    def request(self, kind: str) -> tuple[str, dict[str, Any]]:
        """The URL path and body of a request of ``kind``."""
        if kind == STREAM:
            return self.stream_path, self.stream_body
        return self.plain_path, self.plain_body

    def kind_label(self, kind: str) -> str:
        return f"stream ({self.stream_format})" if kind == STREAM else "JSON"


@dataclass
class Findings:
    """Everything measured for one backend; ``rows`` by (request kind, concurrency)."""

    backend: Backend
    rows: dict[tuple[str, int], Row] = field(default_factory=dict)
    # The same rows round by round (path -> that round's run), for the ratios' intervals.
    rounds: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    pinned: LoadResult | None = None
    rss_peak: int = 0

    def results(self) -> list[LoadResult]:
        """Every run's result (pooled per path), for counting failures."""
        pinned_runs = [self.pinned] if self.pinned is not None else []
        return [result for row in self.rows.values() for result in row.values()] + pinned_runs


def round_order(paths: tuple[str, ...], round_index: int) -> tuple[str, ...]:
    """``paths`` in order; every other round the other way round."""
    return paths if round_index % 2 == 0 else paths[::-1]


def pooled(parts: list[LoadResult]) -> LoadResult:
    """One path's runs as one result (requests/s over the runs' summed wall time)."""
    whole = LoadResult()
    seconds = 0.0
    for part in parts:
        whole.latencies += part.latencies
        whole.first_chunks += part.first_chunks
        whole.gaps += part.gaps
        whole.since_first += part.since_first
        whole.proxy_ms += part.proxy_ms
        whole.chunks += part.chunks
        whole.cpu_s += part.cpu_s
        whole.side_cpu_s += part.side_cpu_s
        whole.errors += part.errors
        whole.error_sample = whole.error_sample or part.error_sample
        seconds += len(part.latencies) / part.rate if part.rate else 0.0
    whole.rate = len(whole.latencies) / seconds if seconds else 0.0
    return whole


def added_ms(via: list[float], direct: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``via`` minus that of ``direct``."""
    return percentile(via, fraction) - percentile(direct, fraction)


def ratio(over: float, under: float) -> float:
    """One added latency over another; NaN when the one below is <= 0 (nothing measurable)."""
    return over / under if under > 0 else math.nan


def ratio_intervals(
    rounds: list[Row],
    pairs: Iterable[tuple[str, str]],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[tuple[str, str, float], Interval]:
    """How far each ratio of added latencies (``over``'s / ``under``'s, per pair, at each of
    ``FRACTIONS``) moves with the rounds that happened to be measured: the ``INTERVAL``
    percentiles of the ratio over ``resamples`` draws of as many rounds, with replacement (a
    round's runs stay together). A draw where ``under`` adds nothing counts as infinite when
    ``over`` adds something (as bad as it gets) and is left out when neither does; (NaN, NaN)
    when half the draws are left out. Each draw sorts each path's samples once for all ratios.
    """
    pairs = list(pairs)
    paths = {path for pair in pairs for path in pair} | {DIRECT}
    draw = random.Random(seed)
    found: dict[tuple[str, str, float], list[float]] = {
        (over, under, fraction): [] for over, under in pairs for fraction in FRACTIONS
    }
    for _ in range(resamples):
        picked = [draw.choice(rounds) for _ in rounds]
        at: dict[tuple[str, float], float] = {}
        for path in paths:
            ordered = sorted(x for each in picked for x in each[path].latencies)
            for fraction in FRACTIONS:
                at[(path, fraction)] = percentile(ordered, fraction)
        for over, under, fraction in found:
            over_added = at[(over, fraction)] - at[(DIRECT, fraction)]
            under_added = at[(under, fraction)] - at[(DIRECT, fraction)]
            if under_added > 0:
                found[(over, under, fraction)].append(over_added / under_added)
            elif over_added > 0:
                found[(over, under, fraction)].append(math.inf)
    intervals: dict[tuple[str, str, float], Interval] = {}
    for key, ratios in found.items():
        if len(ratios) < resamples / 2:
            intervals[key] = (math.nan, math.nan)
        else:
            intervals[key] = (percentile(ratios, INTERVAL[0]), percentile(ratios, INTERVAL[1]))
    return intervals


def chunk_lags(result: LoadResult, direct: LoadResult) -> list[float]:
    """How late each chunk after the first came, against the direct call's median for the
    same chunk (ms after its request's first chunk). Unlike inter-chunk gaps, a chunk held
    back and delivered together with the next one counts as late, not as a zero gap."""
    reference: list[float] = []
    for index in range(max((len(offsets) for offsets in direct.since_first), default=0)):
        same = [offsets[index] for offsets in direct.since_first if len(offsets) > index]
        reference.append(median(same))
    return [
        offset - reference[index]
        for offsets in result.since_first
        for index, offset in enumerate(offsets)
        if index < len(reference)
    ]


def chunk_added(row: Row, path: str, fraction: float) -> float:
    """``path``'s per-chunk added delay at ``fraction``: its chunk lags' percentile minus the
    direct call's own."""
    direct = row[DIRECT]
    return added_ms(chunk_lags(row[path], direct), chunk_lags(direct, direct), fraction)
