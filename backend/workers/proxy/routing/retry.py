"""When to try another node, and how long to wait: the front door's retry policy.

Pure: the caller passes the time (``now``) and the random source of the jitter, so a test can
fix both.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

MAX_DISPATCHES = 5
DEADLINE_S = 600.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
JITTER = 0.25


class RandomSource(Protocol):
    """Where the jitter comes from (``random.Random`` in the worker)."""

    def uniform(self, a: float, b: float, /) -> float:
        """A number between ``a`` and ``b``."""
        ...


def retryable_status(status: int, *, inference: bool) -> bool:
    """Before the first body byte: retry 408, 429, 5xx, and 404 on inference routes only.

    A 404 from an engine whose inventory said it had the model means the inventory was stale.
    """
    if status in (408, 429) or status >= 500:
        return True
    return status == 404 and inference


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
