"""One timer bounding a task's successive waits (a request's headers, its first chunk, each
chunk written and read after it), instead of a timeout context per wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

_SLACK_S = 0.001
# The timer is never set further ahead than this: a shorter wait begun later (the relay's
# 30 s write deadline after the two-minute waits before the commit) then needs no new timer,
# and a long request costs one timer check per horizon.
HORIZON_S = 30.0


class Watchdog:
    """Bounds the task's current wait (the engine's headers, its first chunk; in the relay, a
    chunk written to the client, the next one read from the engine) with one timer instead of
    a timeout context per wait: each wait only notes its deadline; the timer, when it comes,
    cancels the task if the wait it finds has outlived its own, and otherwise moves to that
    wait's deadline. The waiter catches the cancellation, and ``uncancel`` tells it whether
    the watchdog's was the only one (``fired`` names the wait it cut)."""

    __slots__ = ("_deadline", "_handle", "_kind", "_loop", "_now", "_task", "fired")

    def __init__(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        # The loop's clock: asyncio's is ``time.monotonic`` itself, read here without the
        # Python frame of ``loop.time()`` (twice per chunk relayed).
        asyncio_clock = type(loop).time is asyncio.BaseEventLoop.time
        self._now: Callable[[], float] = time.monotonic if asyncio_clock else loop.time
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._kind: str | None = None
        self._deadline = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self.fired: str | None = None

    def begin(self, kind: str, bound: float) -> None:
        """The task now waits for ``kind``, at most ``bound`` seconds (0: unbounded)."""
        if bound <= 0:
            self._kind = None
            return
        now = self._now()
        self._kind, self._deadline = kind, now + bound
        handle = self._handle
        if handle is None or handle.when() > self._deadline:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(min(self._deadline, now + HORIZON_S), self._check)

    def end(self) -> None:
        """Nothing is waited for any more."""
        self._kind = None

    def uncancel(self) -> bool:
        """Take back the watchdog's cancellation; whether nobody else cancelled the task."""
        return self._task.uncancel() == 0

    def close(self) -> None:
        """Stop the timer."""
        self._kind = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        if self._kind is None:
            return
        now = self._now()
        if now >= self._deadline - _SLACK_S:  # the loop may fire a hair early
            self.fired = self._kind
            self._kind = None
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(min(self._deadline, now + HORIZON_S), self._check)
