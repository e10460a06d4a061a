"""Bounds on a task's successive waits (a request's headers, its first chunk, each chunk written
and read after it), kept by one timer per event loop instead of a timeout context per wait.

Each wait only notes its deadline. The loop's one timer is set at the earliest deadline any
watchdog holds; when it comes, it cuts the tasks whose waits outlived their bounds and moves to
the next earliest. A wait that ends, or that is followed by another, leaves the timer alone: a
busy door makes no timer per request, only a watchdog's notes.

A watchdog may have ``patience``: asked when a wait outlives its bound, it may grant more time
(a relayed stream silent for the relay's idle limit whose member is still linked waits on up
to the first-content bound). And it can be told to cut its task's wait at once (``cut_now``:
the member the stream comes from left the routing table), saying why.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

_SLACK_S = 0.001
GONE = "gone"  # ``fired`` after ``cut_now``


class _Sweep:
    """The one timer of a loop, and the watchdogs it looks after."""

    __slots__ = ("at", "handle", "loop", "now", "watched")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # The loop's clock: asyncio's is ``time.monotonic`` itself, read here without the
        # Python frame of ``loop.time()`` (twice per chunk relayed).
        asyncio_clock = type(loop).time is asyncio.BaseEventLoop.time
        self.now: Callable[[], float] = time.monotonic if asyncio_clock else loop.time
        self.watched: set[Watchdog] = set()
        self.at = math.inf  # when the timer is set for (inf: not set)
        self.handle: asyncio.TimerHandle | None = None

    def arm(self, at: float) -> None:
        """Set the timer for ``at`` (earlier than it is set for)."""
        if self.handle is not None:
            self.handle.cancel()
        self.at = at
        self.handle = self.loop.call_at(at, self._sweep)

    def _sweep(self) -> None:
        self.handle, self.at = None, math.inf
        now = self.now()
        earliest = math.inf
        for watchdog in list(self.watched):
            deadline = watchdog.deadline
            # The loop may fire a hair early; a wait granted more time stays watched.
            if watchdog.kind is None or (now >= deadline - _SLACK_S and watchdog.expired(now)):
                self.watched.discard(watchdog)
            elif watchdog.deadline < earliest:
                earliest = watchdog.deadline
        if earliest < math.inf:
            self.arm(earliest)


# The sweep of the loop that made the last watchdog (a process runs one loop; a test, many).
_current: tuple[asyncio.AbstractEventLoop, _Sweep] | None = None


def _sweep_of(loop: asyncio.AbstractEventLoop) -> _Sweep:
    global _current
    current = _current
    if current is not None and current[0] is loop:
        return current[1]
    sweep = _Sweep(loop)
    _current = (loop, sweep)
    return sweep


class Watchdog:
    """Bounds the task's current wait (the engine's headers, its first chunk; in the relay, a
    chunk written to the client, the next one read from the engine): each wait only notes its
    deadline, and the loop's one timer cancels the task if the wait it finds has outlived its
    own. The waiter catches the cancellation, and ``uncancel`` tells it whether the watchdog's
    was the only one (``fired`` names the wait it cut)."""

    __slots__ = ("_sweep", "_task", "deadline", "fired", "kind", "patience", "why")

    def __init__(self) -> None:
        self._sweep = _sweep_of(asyncio.get_running_loop())
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.kind: str | None = None
        self.deadline = 0.0
        self.fired: str | None = None
        # Asked with the wait's kind and deadline when it outlives its bound: a later deadline
        # to wait on, or anything else to cut it.
        self.patience: Callable[[str, float], float] | None = None
        self.why: str | None = None  # what cut the wait, when more than its bound

    def begin(self, kind: str, bound: float) -> None:
        """The task now waits for ``kind``, at most ``bound`` seconds (0: unbounded)."""
        if bound <= 0:
            self.kind = None
            return
        sweep = self._sweep
        deadline = sweep.now() + bound
        if self.kind is None:  # a watchdog waiting for something is watched already
            sweep.watched.add(self)
        self.kind, self.deadline = kind, deadline
        if deadline < sweep.at:
            sweep.arm(deadline)

    def end(self) -> None:
        """Nothing is waited for any more."""
        self.kind = None

    def uncancel(self) -> bool:
        """Take back the watchdog's cancellation; whether nobody else cancelled the task."""
        return self._task.uncancel() == 0

    def close(self) -> None:
        """Nothing will be waited for again: the loop's timer forgets this watchdog."""
        self.kind = None
        self._sweep.watched.discard(self)

    def expired(self, now: float) -> bool:
        """The current wait outlived its bound: cut it, unless ``patience`` grants a later
        deadline (then it waits on). Whether it was cut (the sweep calls this)."""
        patience = self.patience
        if patience is not None and self.kind is not None:
            later = patience(self.kind, self.deadline)
            if later > now:
                self.deadline = later
                return False
        self.cut()
        return True

    def cut(self) -> None:
        """Cancel the task's current wait (``fired`` names it)."""
        self.fired, self.kind = self.kind, None
        self._task.cancel()

    def cut_now(self, why: str) -> None:
        """Cut the task's current wait at once, for ``why`` (``fired`` is ``GONE``); nothing
        if it waits for nothing (its work is over, or between two waits of no bound)."""
        if self.kind is None:
            return
        self.why = why
        self.kind = GONE
        self.cut()
