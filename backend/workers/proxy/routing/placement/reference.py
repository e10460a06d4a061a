"""The reference system's ranking rule, exactly: pending jobs + GPU pressure + reservations.

GPU pressure (pair-anchor.md, "Job scheduler"): the busiest GPU's utilisation, clamped to
0-100 and smoothed with an exponential moving average (alpha 0.35), then put in bands: 0 under
40 %, 1 under 70 %, 2 under 85 %, 3 from 85 %; on the way down a band is kept until the
average falls under 35, 65 or 80 %. A sample older than 10 s, an invalid one or none counts
as 1 (neutral); the first fresh sample after such a gap starts the average again. The node
with the least ``pending + pressure + reservations`` goes first; ties go by the reference
scheduler's own order (``pending + pressure``, then ``pressure``), then the candidates' order
(priority list, this node, node id). No affinity: the reference has none.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from backend.protocol.proxy import GpuSample
from backend.workers.proxy.routing.placement.inputs import NEUTRAL_PRESSURE, Candidate, NodeId

ALPHA = 0.35
STALE_S = 10.0
BANDS_UP = (40.0, 70.0, 85.0)
BANDS_DOWN = (35.0, 65.0, 80.0)


def band(smoothed: float, previous: int | None = None) -> int:
    """The pressure band of a smoothed utilisation, with hysteresis on the way down."""
    rising = sum(smoothed >= edge for edge in BANDS_UP)
    if previous is None or rising >= previous:
        return rising
    return max(rising, min(previous, sum(smoothed >= edge for edge in BANDS_DOWN)))


class _Smoothed(msgspec.Struct, frozen=True):
    average: float
    band: int
    sampled_at: float


class PressureBook:
    """Each node's smoothed GPU utilisation and band, fed the table's samples."""

    def __init__(self) -> None:
        self._nodes: dict[NodeId, _Smoothed] = {}

    def observe(self, node: NodeId, sample: GpuSample, now: float) -> None:
        """Take ``sample`` (Unix times) unless it is stale or already taken."""
        if now - sample.sampled_at > STALE_S:
            return
        percent = min(100.0, max(0.0, sample.percent))
        last = self._nodes.get(node)
        if last is not None and sample.sampled_at <= last.sampled_at:
            return
        if last is None or sample.sampled_at - last.sampled_at > STALE_S:
            self._nodes[node] = _Smoothed(percent, band(percent), sample.sampled_at)
            return
        average = ALPHA * percent + (1 - ALPHA) * last.average
        self._nodes[node] = _Smoothed(average, band(average, last.band), sample.sampled_at)

    def pressure(self, node: NodeId, now: float) -> int:
        """The node's band now; neutral without a fresh sample."""
        last = self._nodes.get(node)
        if last is None or now - last.sampled_at > STALE_S:
            return NEUTRAL_PRESSURE
        return last.band

    def keep_only(self, nodes: Collection[NodeId]) -> None:
        """Forget the nodes that left the table."""
        for node in [n for n in self._nodes if n not in nodes]:
            del self._nodes[node]


def score(candidate: Candidate) -> int:
    """The reference's load of a node."""
    return candidate.pending + candidate.gpu_pressure + candidate.reserved


def pick(candidates: Sequence[Candidate]) -> NodeId:
    """The least loaded candidate. Ties go by the reference scheduler's priority order (the
    snapshot's ``pending + pressure``, then ``pressure``), then the given order."""
    if not candidates:
        raise ValueError("no candidate to place the request on")
    return min(
        candidates, key=lambda c: (score(c), c.pending + c.gpu_pressure, c.gpu_pressure)
    ).node
