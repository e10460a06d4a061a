"""PAIR's ranking rule: the node where this request is expected to finish first.

For each owner of the model (docs/PLACEMENT.md has the reasoning behind each term):

    expected = wait for a slot + load + first token + answer tokens / tokens per second
               - affinity credit

- **Service time** ``service = first_token_s + answer_tokens / tokens_per_s``: the node and
  model's measured time to first token and generation speed (``measure.SpeedBook``), and the
  model's mean answer length as measured by this router (``DEFAULT_ANSWER_TOKENS`` until then).
- **Wait for a slot**: ``queue`` jobs are ahead (the table's pending jobs plus this router's
  reservations, so a burst spreads). With a free slot (``queue < slots``) the request starts at
  once; otherwise it waits for ``queue - slots + 1`` jobs to finish, ``slots`` at a time:
  ``(queue - slots + 1) * service / slots``.
- **Load**: when the model is not resident on the node, its load time there (measured, else
  ``DEFAULT_LOAD_S``). A node that did not say what it holds pays nothing, nor does a cold
  node never measured at all: charging an unknown node for its load would keep a fast node
  that starts cold from ever being tried (it is tried once, then measured).
- **Speed not measured yet**: the node is assumed as fast as the fastest measured owner of the
  model (``DEFAULT_TOKENS_PER_S`` when none is), and wins ties, so it is tried, not starved. A
  measured speed decays toward that optimistic figure (half-life ``SPEED_HALF_LIFE_S``) while
  the node gets no work, so one slow spell is not held against it forever.
- **Affinity**: the node that served this conversation last has ``AFFINITY_CREDIT`` times its
  time to first token taken off: about the prompt evaluation its warm KV saves (the engine
  scheduler's 1.5, in that node's own seconds instead of jobs, so a slow node's credit never
  outweighs a fast node's free slot).

Ties keep the candidates' order (pin, priority list, this node, node id); a pin is honoured by
the router before any rule runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from backend.workers.proxy.routing.candidates import AFFINITY_CREDIT as AFFINITY_CREDIT_JOBS
from backend.workers.proxy.routing.placement.inputs import Candidate, NodeId, Pace

DEFAULT_TOKENS_PER_S = 50.0
DEFAULT_FIRST_TOKEN_S = 0.3
DEFAULT_LOAD_S = 5.0
DEFAULT_ANSWER_TOKENS = 256.0
SPEED_HALF_LIFE_S = 600.0
AFFINITY_CREDIT = AFFINITY_CREDIT_JOBS  # the engine scheduler's, in first-token times here


class Estimate(msgspec.Struct, frozen=True, gc=False):
    """How long a request is expected to take on one node, term by term (seconds)."""

    node: NodeId
    wait_s: float
    load_s: float
    service_s: float
    credit_s: float
    measured: bool

    @property
    def total_s(self) -> float:
        """Expected seconds until the request completes there."""
        return self.wait_s + self.load_s + self.service_s - self.credit_s


def speed(pace: Pace, optimistic: float) -> float:
    """The tokens/s to plan with: the measurement decayed toward ``optimistic`` with its age."""
    if pace.tokens_per_s is None:
        return optimistic
    if pace.tokens_per_s >= optimistic:
        return pace.tokens_per_s
    kept = math.pow(0.5, max(0.0, pace.age_s) / SPEED_HALF_LIFE_S)
    return optimistic - (optimistic - pace.tokens_per_s) * kept


def estimate(
    candidate: Candidate, *, answer_tokens: float, optimistic_tokens_per_s: float
) -> Estimate:
    """The expected completion of a request on ``candidate``, term by term."""
    pace = candidate.pace
    first_token = pace.first_token_s if pace.first_token_s is not None else DEFAULT_FIRST_TOKEN_S
    rate = max(speed(pace, optimistic_tokens_per_s), 1e-3)
    service = first_token + answer_tokens / rate
    slots = max(1, candidate.slots)
    queue = candidate.queue
    wait = 0.0 if queue < slots else (queue - slots + 1) * service / slots
    load = load_time(candidate) if candidate.resident is False else 0.0
    credit = AFFINITY_CREDIT * first_token if candidate.affinity else 0.0
    return Estimate(candidate.node, wait, load, service, credit, pace.tokens_per_s is not None)


def load_time(candidate: Candidate) -> float:
    """The seconds a cold node takes to load the model: measured, else the default; nothing
    for a node whose speed is not measured either (it is tried once, not starved)."""
    pace = candidate.pace
    if pace.load_s is not None:
        return pace.load_s
    return DEFAULT_LOAD_S if pace.tokens_per_s is not None else 0.0


def estimates(candidates: Sequence[Candidate], answer_tokens: float) -> list[Estimate]:
    """Every candidate's estimate, in the candidates' order."""
    measured = [c.pace.tokens_per_s for c in candidates if c.pace.tokens_per_s is not None]
    optimistic = max(measured) if measured else DEFAULT_TOKENS_PER_S
    return [
        estimate(c, answer_tokens=answer_tokens, optimistic_tokens_per_s=optimistic)
        for c in candidates
    ]


def pick(candidates: Sequence[Candidate], answer_tokens: float = DEFAULT_ANSWER_TOKENS) -> NodeId:
    """The candidate expected to finish first; an unmeasured node wins a tie, then order."""
    if not candidates:
        raise ValueError("no candidate to place the request on")
    ranked = estimates(candidates, answer_tokens)
    return min(ranked, key=lambda e: (round(e.total_s, 9), e.measured)).node
