"""The front door's failover policy, as pure functions over a frozen ``Failover``.

One request's budget (at most 5 dispatches within 10 minutes) and the backoff between rounds
(1, 2, 4, 8 s ±25 %); which candidates a round may still try; what follows a round that served
nobody (back off, answer "model gone", give up) and which answer a request that gave up gets;
which nodes new requests skip a while because they answered busy. The caller passes the time
(``now``) and the jitter's random source, so a test can fix both; the I/O around it
(``dispatch``) only observes and applies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.upstream.attempt import Failure

MAX_DISPATCHES = 5
DEADLINE_S = 600.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
JITTER = 0.25
# A node that answered busy (429, 503) is not asked again for this long by new requests.
BUSY_HOLD_S = 2.0
BUSY_STATUSES = (429, 503)
WRITE_DEADLINE_S = 30.0
# How long a request waits for a member that is away (restarting, or its link down) when no
# other node has the model: one that is back within this long serves it (a blip of the link),
# else the door's 503 names it with Retry-After. Short, so that a request caught by a member's
# link dying is answered about 5 s after the fault (3 s for the link to go down, then this).
AWAY_WAIT_S = 2.0


class RandomSource(Protocol):
    """Where the jitter comes from (``random.Random`` in the worker)."""

    def uniform(self, a: float, b: float, /) -> float:
        """A number between ``a`` and ``b``."""
        ...


def backoff(dispatches: int, rng: RandomSource, schedule: tuple[float, ...] = BACKOFF_S) -> float:
    """Seconds before the next round: 1, 2, 4, 8 (clamped) after that many dispatches, ±25 %."""
    base = schedule[min(max(dispatches - 1, 0), len(schedule) - 1)]
    return base * (1 + rng.uniform(-JITTER, JITTER))


class Budget(msgspec.Struct, frozen=True, gc=False):
    """A request's dispatch budget: at most ``max_dispatches``, none after the deadline."""

    created_at: float
    dispatches: int = 0
    max_dispatches: int = MAX_DISPATCHES
    deadline_s: float = DEADLINE_S
    schedule: tuple[float, ...] = BACKOFF_S

    def may_dispatch(self, now: float) -> bool:
        """Whether another attempt may start now."""
        return self.dispatches < self.max_dispatches and now < self.created_at + self.deadline_s

    def dispatched(self) -> Budget:
        """The budget after one more dispatch."""
        return Budget(
            self.created_at,
            self.dispatches + 1,
            self.max_dispatches,
            self.deadline_s,
            self.schedule,
        )

    def wait_before_next(self, now: float, rng: RandomSource) -> float | None:
        """The backoff before the next round, or None when no round may start in time."""
        if not self.may_dispatch(now):
            return None
        delay = backoff(self.dispatches, rng, self.schedule)
        return delay if now + delay < self.created_at + self.deadline_s else None


class RetryPolicy(msgspec.Struct, frozen=True):
    """Dispatch budget and backoff (the environment can shorten them for tests)."""

    max_dispatches: int = MAX_DISPATCHES
    deadline_s: float = DEADLINE_S
    schedule: tuple[float, ...] = BACKOFF_S
    # A client that has not taken a chunk for this long is cut (a half-open "zombie").
    write_deadline_s: float = WRITE_DEADLINE_S


class Failover(msgspec.Struct, frozen=True, gc=False):
    """Where one request's failover stands: its budget, the attempts numbered so far, the nodes
    tried in this round and the last failure."""

    budget: Budget
    attempt: int = 0
    tried: tuple[str, ...] = ()
    last: Failure | None = None
    away_since: float | None = None  # since when only an away member has the model


class Backoff(msgspec.Struct, frozen=True):
    """Wait this long, then start a new round over the table as it is then."""

    seconds: float


class Vanished(msgspec.Struct, frozen=True):
    """No node lists the model and none is bringing it back: the door's unknown-model answer."""


class GiveUp(msgspec.Struct, frozen=True):
    """No round may start any more: answer with ``final_answer``."""


class Away(msgspec.Struct, frozen=True):
    """Only a member that is away has the model, and it has not come back within
    ``AWAY_WAIT_S``: the door's 503 naming it."""


RoundEnd = Backoff | Vanished | GiveUp | Away


class Unreachable(msgspec.Struct, frozen=True):
    """No node that has the model could be reached in time (503, retry after 5 s)."""


class Relayed(msgspec.Struct, frozen=True):
    """The last node's own error status, passed on to the client."""

    failure: Failure


class BadGateway(msgspec.Struct, frozen=True):
    """The last node failed without a status of its own: 504 if it went silent, else 502."""

    status: int
    message: str


FinalAnswer = Unreachable | Relayed | BadGateway


def started(policy: RetryPolicy, now: float, resumed_attempt: int | None) -> Failover:
    """A request's failover at its start; a resumed one goes on after its last attempt."""
    budget = Budget(now, 0, policy.max_dispatches, policy.deadline_s, policy.schedule)
    return Failover(budget, resumed_attempt - 1 if resumed_attempt else 0)


def untried(state: Failover, found: Sequence[RouteTarget], now: float) -> list[RouteTarget]:
    """The candidates this round may still try, in order; none once the budget is spent."""
    if not state.budget.may_dispatch(now):
        return []
    tried = state.tried
    return [target for target in found if target.node_id not in tried]


def dispatched(state: Failover, node: str) -> Failover:
    """``state`` after one more attempt was sent to ``node``."""
    return msgspec.structs.replace(
        state,
        budget=state.budget.dispatched(),
        attempt=state.attempt + 1,
        tried=(*state.tried, node),
    )


def moved(state: Failover, node: str) -> Failover:
    """``state`` after its latest attempt left ``node``'s queue for a node that frees up
    sooner (``rebalance.py``): not a failure, so the dispatch is given back and ``node`` may
    be tried again this round."""
    budget = state.budget
    return msgspec.structs.replace(
        state,
        budget=msgspec.structs.replace(budget, dispatches=max(0, budget.dispatches - 1)),
        tried=tuple(tried for tried in state.tried if tried != node),
    )


def failed(state: Failover, failure: Failure) -> Failover:
    """``state`` after its latest attempt failed before the commit."""
    return msgspec.structs.replace(state, last=failure)


def next_round(state: Failover) -> Failover:
    """``state`` for a new round, after the backoff: every node may be tried again."""
    return msgspec.structs.replace(state, tried=())


def round_ended(
    state: Failover, now: float, rng: RandomSource, *, pinned: bool, vanished: bool
) -> RoundEnd:
    """What follows a round that served nobody.

    A request pinned to given targets (``pinned``) gets one round. A model that ``vanished``
    from the table, with no member bringing it back, ends the request at once rather than
    after minutes of waiting; one only an away member has, once it waited ``AWAY_WAIT_S``
    for it (``awaiting``). Otherwise back off, unless no round could start in time.
    """
    if pinned:
        return GiveUp()
    if vanished:
        return Vanished()
    if state.away_since is None:
        wait = state.budget.wait_before_next(now, rng)
        return GiveUp() if wait is None else Backoff(wait)
    left = AWAY_WAIT_S - (now - state.away_since)
    if left <= 0:
        return Away()
    wait = state.budget.wait_before_next(now, rng)
    # The next look is no later than the end of the wait for the away member.
    return Away() if wait is None else Backoff(min(wait, left))


def awaiting(state: Failover, away: bool, now: float) -> Failover:
    """``state`` noting since when only an ``away`` member has the model (forgotten once a
    node lists it again)."""
    if away == (state.away_since is not None):
        return state
    return msgspec.structs.replace(state, away_since=now if away else None)


def final_answer(state: Failover, now: float) -> FinalAnswer:
    """The answer of a request that gave up.

    A node's own status is passed on once the budget is spent on it; a transport failure while
    the budget still allowed more (the table had nobody left to try) reads as unreachable.
    """
    last = state.last
    if last is None or (state.budget.may_dispatch(now) and last.kind != "status"):
        return Unreachable()
    if last.kind == "status" and last.status is not None:
        return Relayed(last)
    return BadGateway(504 if last.kind == "no-content" else 502, last.message)


def holds_busy(failure: Failure) -> bool:
    """Whether the failure was the node saying it is busy (new requests skip it a while)."""
    return failure.status in BUSY_STATUSES


def busy_retry_after(
    busy_until: Mapping[str, float], nodes: Iterable[str], now: float
) -> int | None:
    """Seconds a client should wait when every one of ``nodes`` is held busy; None otherwise."""
    holds = [busy_until.get(node, 0.0) - now for node in nodes]
    if not holds or min(holds) <= 0:
        return None
    return max(1, math.ceil(min(holds)))


def busy_held(busy_until: Mapping[str, float], node: str, now: float) -> Mapping[str, float]:
    """``busy_until`` with ``node`` held busy for ``BUSY_HOLD_S`` from ``now`` (a new mapping)."""
    return {**busy_until, node: now + BUSY_HOLD_S}


def busy_freed(busy_until: Mapping[str, float], node: str) -> Mapping[str, float]:
    """``busy_until`` without ``node``'s hold: it committed a response (unchanged if none)."""
    if node not in busy_until:
        return busy_until
    return {other: until for other, until in busy_until.items() if other != node}
