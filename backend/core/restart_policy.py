"""The restart decision as a pure function: backoff 1, 2, 4, 8, 16 s, 5 attempts per streak."""

from __future__ import annotations

import msgspec


class RestartPolicy(msgspec.Struct, frozen=True):
    """Backoff schedule, attempts per unhealthy streak, and the healthy time that resets it."""

    backoff: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    max_attempts: int = 5
    healthy_reset: float = 60.0


class Streak(msgspec.Struct, frozen=True):
    """Restarts made since the component last ran healthy for ``healthy_reset`` seconds."""

    attempts: int = 0


class Restart(msgspec.Struct, frozen=True):
    """Restart after ``delay`` seconds; this is restart number ``attempt`` of the streak."""

    delay: float
    attempt: int


class GiveUp(msgspec.Struct, frozen=True):
    """The streak used every attempt: leave the component down."""

    attempts: int


Decision = Restart | GiveUp


def decide_after_exit(
    policy: RestartPolicy, streak: Streak, ran_for: float
) -> tuple[Streak, Decision]:
    """What to do when a run that lasted ``ran_for`` seconds crashed."""
    attempts = 0 if ran_for >= policy.healthy_reset else streak.attempts
    if attempts >= policy.max_attempts:
        return Streak(attempts), GiveUp(attempts)
    delay = policy.backoff[min(attempts, len(policy.backoff) - 1)]
    return Streak(attempts + 1), Restart(delay, attempts + 1)


def not_ready_delay(policy: RestartPolicy, tries: int) -> float:
    """Backoff for a component waiting on a dependency (never gives up)."""
    return policy.backoff[min(tries, len(policy.backoff) - 1)]
