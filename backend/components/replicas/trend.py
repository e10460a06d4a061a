"""Whether a model's wait is rising toward its target faster than a replica could come up.

Knative's windows look back: the stable window's mean and the panic window's. A wait that
builds up (a team arriving at 9 am) trips them only once it is long already, and placement
alone loads the model elsewhere once the wait passes the load time, so a planner that waits
for a long wait adds little to it. This looks forward: over the panic window, the trend of
the expected wait (request-weighted least squares of each report's wait against its time),
projected ``lead_s`` ahead (about a replica's load) from the latest report. A projection
above the target, while the latest wait is already a good part of it (``floor``), is pressure
now: the replica is then ready about when the wait would have reached the target.

Pure: frozen values in, a value out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

# Reports spanning less than this say nothing of a trend.
MIN_SPAN_S = 1.0


class Sample(Protocol):
    """What a report says of one model (``plan.WaitSample``)."""

    @property
    def at(self) -> float: ...

    @property
    def requests(self) -> int: ...

    @property
    def wait_s(self) -> float: ...


class Rising(msgspec.Struct, frozen=True):
    """A rising wait: the requests seen, the latest report's wait, its slope (s per s) and
    the wait projected ``lead_s`` ahead."""

    requests: int
    latest_s: float
    slope: float
    projected_s: float


def rising_wait(samples: Sequence[Sample], since: float, lead_s: float) -> Rising | None:
    """The wait's trend over the reports after ``since``; None when it is not rising (or
    there are too few reports, or they span less than ``MIN_SPAN_S``)."""
    chosen = [s for s in samples if s.at > since and s.requests > 0]
    if len(chosen) < 2:
        return None
    latest = max(chosen, key=lambda s: s.at)
    span = latest.at - min(s.at for s in chosen)
    if span < MIN_SPAN_S:
        return None
    weight = sum(s.requests for s in chosen)
    mean_t = sum(s.requests * s.at for s in chosen) / weight
    mean_w = sum(s.requests * max(s.wait_s, 0.0) for s in chosen) / weight
    spread = sum(s.requests * (s.at - mean_t) ** 2 for s in chosen)
    if spread <= 0:
        return None
    slope = sum(s.requests * (s.at - mean_t) * (max(s.wait_s, 0.0) - mean_w) for s in chosen)
    slope /= spread
    if slope <= 0:
        return None
    latest_s = max(latest.wait_s, 0.0)
    return Rising(weight, latest_s, slope, latest_s + slope * lead_s)


def rises_past(rising: Rising | None, target_s: float, floor: float, min_requests: int) -> bool:
    """Whether ``rising`` calls for a replica now: enough requests, the latest wait at least
    ``floor`` of the target, and the projection above it."""
    if rising is None or rising.requests < min_requests:
        return False
    return rising.latest_s >= floor * target_s and rising.projected_s > target_s
