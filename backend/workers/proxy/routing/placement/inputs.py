"""What placement knows about one eligible node when a request is placed (a plain value).

Every field comes from what the cluster already shares: the routing table (the node's pending
jobs from its node-info or this node's own job loads, its slots and resident models from
node-info or the engine manager, GPU utilisation from node-info's telemetry), the router's own
reservations, and what this node measured from the jobs it routed (``measure.SpeedBook``).
"""

from __future__ import annotations

import msgspec

NodeId = str
# The reference's GPU pressure for a node without a fresh sample: neither idle nor busy.
NEUTRAL_PRESSURE = 1


class Pace(msgspec.Struct, frozen=True, gc=False):
    """What this node measured of one node and model; None: not measured yet.

    ``age_s`` is how long ago the last measurement was taken (the speed's weight decays).
    """

    tokens_per_s: float | None = None
    first_token_s: float | None = None
    load_s: float | None = None
    age_s: float = 0.0


class Candidate(msgspec.Struct, frozen=True, gc=False):
    """One owner of the requested model, as placement sees it at this moment.

    ``pending`` is the node's queued and running jobs at the table's snapshot, ``reserved``
    the dispatches this router sent it since; ``slots`` how many requests the node's engine
    runs at once for the model; ``resident`` whether the model is loaded there (None: the node
    did not say); ``gpu_pressure`` the reference's band (0-3, ``NEUTRAL_PRESSURE`` without a
    fresh sample); ``affinity`` whether it served this conversation last.
    """

    node: NodeId
    pending: int = 0
    reserved: int = 0
    slots: int = 1
    resident: bool | None = None
    gpu_pressure: int = NEUTRAL_PRESSURE
    pace: Pace = Pace()
    affinity: bool = False

    @property
    def queue(self) -> int:
        """Jobs ahead of a new request on this node (all models: the engine shares them)."""
        return max(0, self.pending) + max(0, self.reserved)
