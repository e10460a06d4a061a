"""How often the GUI restarts a broker it owns that crashed: a pure sliding-window budget."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec

RESTART_LIMIT = 3
RESTART_WINDOW_S = 60.0


def recent_crashes(crash_times: Sequence[float], now: float, window: float) -> list[float]:
    """The crash times that fall inside the window ending at ``now``."""
    return [moment for moment in crash_times if now - moment < window]


def may_restart(
    crash_times: Sequence[float],
    now: float,
    *,
    limit: int = RESTART_LIMIT,
    window: float = RESTART_WINDOW_S,
) -> bool:
    """Whether the latest crash (included in ``crash_times``) may be answered by a restart.

    At most ``limit`` restarts happen within any ``window`` seconds, so the ``limit + 1``-th
    crash inside the window means the broker cannot stay up and the GUI gives up.
    """
    return len(recent_crashes(crash_times, now, window)) <= limit


class RestartPolicy(msgspec.Struct):
    """Remembers recent crashes of the owned broker; ``clock`` is injectable for tests."""

    clock: Callable[[], float] = time.monotonic
    limit: int = RESTART_LIMIT
    window: float = RESTART_WINDOW_S
    _crashes: list[float] = msgspec.field(default_factory=list)

    def record_crash(self) -> bool:
        """Note a crash now; True when a restart is still within the budget."""
        now = self.clock()
        self._crashes = [*recent_crashes(self._crashes, now, self.window), now]
        return may_restart(self._crashes, now, limit=self.limit, window=self.window)

    def reset(self) -> None:
        """Forget past crashes (the user asked for a fresh start)."""
        self._crashes.clear()

    @property
    def recent(self) -> int:
        """How many crashes fall inside the window now."""
        return len(recent_crashes(self._crashes, self.clock(), self.window))
