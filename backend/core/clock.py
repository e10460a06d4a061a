"""Time as a dependency, so policies and loops can be tested with a patched clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol


class Clock(Protocol):
    """Monotonic time, wall time and sleeping."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def wall(self) -> float:
        """Unix time in seconds (for timestamps shown to people)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The real clock. Its readings are the ``time`` functions themselves (no Python frame
    around them: the proxy reads the clock several times per request)."""

    monotonic = staticmethod(time.monotonic)
    wall = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        await asyncio.sleep(seconds)


# A number above 1 makes supervision's time run that many times faster than the real clock
# (tests of the restart schedule: its 1 + 2 + 4 + 8 + 16 s are a policy, not what they test).
SUPERVISION_SPEED_ENV = "PAIR_SUPERVISION_CLOCK_SPEED"


class FastClock:
    """``base`` running ``speed`` times faster from the moment it is made: readings advance
    ``speed`` seconds per real second and ``sleep(s)`` waits ``s / speed``, so what is measured
    and what is waited for on it agree exactly, only sooner."""

    def __init__(self, base: Clock, speed: float) -> None:
        self._base = base
        self._speed = speed
        self._origin = base.monotonic()
        self._wall_origin = base.wall()

    def monotonic(self) -> float:
        """Seconds on this clock (never goes back)."""
        return self._origin + (self._base.monotonic() - self._origin) * self._speed

    def wall(self) -> float:
        """Unix time on this clock: the real one when it was made, then ``speed`` times faster."""
        return self._wall_origin + (self._base.monotonic() - self._origin) * self._speed

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock."""
        await self._base.sleep(seconds / self._speed)


def supervision_clock(base: Clock, environment: Mapping[str, str]) -> Clock:
    """The supervisor's clock: ``base``, or a ``FastClock`` when the environment asks for one
    (``PAIR_SUPERVISION_CLOCK_SPEED``, a number above 1; anything else is ignored)."""
    try:
        speed = float(environment.get(SUPERVISION_SPEED_ENV, ""))
    except ValueError:
        return base
    return FastClock(base, speed) if 1 < speed < float("inf") else base
