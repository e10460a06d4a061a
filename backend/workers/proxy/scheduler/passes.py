"""The scheduler's decision passes, one at a time (``Passes``): asked for while one runs, a
pass runs once more after it, never two at once, and one can be asked for after a delay (the
poll of an engine whose slots are all taken from outside)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from backend.common.tasks import TaskSet
from backend.core.clock import Clock

log = logging.getLogger(__name__)


class Passes:
    """Runs ``decide`` in the ``tasks`` of ``name``; ``after`` once a run of passes ends."""

    def __init__(
        self,
        name: str,
        decide: Callable[[], Awaitable[None]],
        after: Callable[[], None],
        *,
        tasks: TaskSet,
        clock: Clock,
    ) -> None:
        self._name = name
        self._decide = decide
        self._after = after
        self._tasks = tasks
        self._clock = clock
        self.running = False
        self._again = False
        self._polling = False

    def kick(self) -> None:
        """Ask for a pass; asks during a pass collapse into one more pass after it."""
        if self.running:
            self._again = True
            return
        self.running = True
        self._tasks.spawn(self._run(), name=f"{self._name}:pass")

    def poll(self, delay_s: float) -> None:
        """Ask for a pass in ``delay_s`` (once: a poll already due covers it)."""
        if self._polling:
            return
        self._polling = True
        self._tasks.spawn(self._later(delay_s), name=f"{self._name}:poll")

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    await self._decide()
                except Exception:
                    log.exception("a decision pass of %s failed", self._name)
                if not self._again:
                    return
        finally:
            self.running = False
            self._after()

    async def _later(self, delay_s: float) -> None:
        try:
            await self._clock.sleep(delay_s)
        finally:
            self._polling = False
        self.kick()
