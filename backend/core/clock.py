"""Time as a dependency, so policies and loops can be tested with a patched clock."""

from __future__ import annotations

import asyncio
import time
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
