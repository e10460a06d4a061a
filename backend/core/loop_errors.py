"""Out-of-resource errors the event loop reports for its listeners, as one line per interval.

When a process runs out of descriptors, asyncio's loop reports every failed ``accept()`` to the
loop's exception handler ("socket.accept() out of system resource", traceback included) and
retries a moment later: a flood of connections then writes hundreds of thousands of tracebacks,
filling the rotating logs and erasing their history. ``AcceptErrorLog`` is the exception handler
PAIR's processes install: such an error becomes one WARNING line at once and then, while they go
on, one line per ``INTERVAL_S`` counting them (the loop still retries; nothing else changes).
Every other error goes to the loop's default handler as before.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

INTERVAL_S = 10.0
# What ``accept()`` fails with when the process or the system is out of descriptors or memory.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def is_resource_error(context: dict[str, Any]) -> bool:
    """Whether the loop reports running out of descriptors or memory (an ``OSError``)."""
    exc = context.get("exception")
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


class CountedLine:
    """One log line for a burst of like events: the first at once, then at most one per
    ``interval_s`` counting those since (a timer writes the count of a burst that stopped)."""

    def __init__(
        self,
        write: Callable[[int], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._write = write
        self._clock = clock
        self._interval_s = interval_s
        self._last_line = float("-inf")
        self._suppressed = 0
        self._flush: asyncio.TimerHandle | None = None

    def note(self, loop: asyncio.AbstractEventLoop) -> None:
        """Count one event; write the line if one is due."""
        self._suppressed += 1
        wait = self._last_line + self._interval_s - self._clock()
        if wait <= 0:
            self._write_suppressed()
        elif self._flush is None:
            self._flush = loop.call_later(wait, self._write_suppressed)

    def _write_suppressed(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._suppressed:
            count, self._suppressed = self._suppressed, 0
            self._last_line = self._clock()
            self._write(count)


class AcceptErrorLog:
    """A loop exception handler: resource errors counted into one line per ``interval_s``."""

    def __init__(
        self,
        into: logging.Logger = log,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._into = into
        self._reason = ""
        self._line = CountedLine(self._write, clock=clock, interval_s=interval_s)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Count a resource error (the first of an interval is written); pass anything else on."""
        if not is_resource_error(context):
            loop.default_exception_handler(context)
            return
        self._reason = os.strerror(context["exception"].errno)
        self._line.note(loop)

    def _write(self, count: int) -> None:
        self._into.warning(
            "connections could not be accepted (%s): %d time(s) since the last such line; "
            "the listeners retry, and the owner's loopback requests may fail until it eases",
            self._reason,
            count,
        )


def install_accept_error_log(into: logging.Logger = log) -> AcceptErrorLog:
    """Make an ``AcceptErrorLog`` the running loop's exception handler; it is returned."""
    handler = AcceptErrorLog(into)
    asyncio.get_running_loop().set_exception_handler(handler)
    return handler
