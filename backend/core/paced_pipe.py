"""A child process whose stdout is read at most once per pace interval.

A proxy worker writes a job's end to its stdout pipe the moment the job ends, before its
client's last byte (research rule G4): in the pipe, the end outlives the worker. Read as it
comes, every such write wakes the broker, one wake per request, each a context switch and a
turn of the broker's loop competing with the requests for the CPU. What is in the pipe is safe
whether the broker reads it now or a few milliseconds later, so the broker's side reads it in
paced bursts: after a read, the pipe is left alone (unwatched, so writes to it wake nobody)
for ``pace`` seconds, then everything that came meanwhile is read at once. A read after a quiet
spell (``QUIET_PACES`` paces without one: a heartbeat's answer at rest) pauses nothing, so an
idle broker is woken once per message, not once more by the pace's timer. Nothing is lost or
reordered: the data waits in the pipe, and at the worker's exit the pipe is read to its end
before the process counts as finished (asyncio's ``Process.wait`` waits for its pipes).
"""

from __future__ import annotations

import asyncio
import asyncio.subprocess as aio_subprocess
from collections.abc import Sequence
from typing import Any

STDOUT = 1
# A read this many paces after the one before it is not paced (the pipe was quiet).
QUIET_PACES = 10


class PacedStdout(aio_subprocess.SubprocessStreamProtocol):
    """``create_subprocess_exec``'s protocol, with stdout read at most once per ``pace`` s."""

    def __init__(self, pace: float, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self._pace = pace
        self._event_loop = loop
        self._pipe: asyncio.ReadTransport | None = None
        self._resume: asyncio.TimerHandle | None = None
        self._last_read = -float("inf")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert isinstance(transport, asyncio.SubprocessTransport)
        pipe = transport.get_pipe_transport(STDOUT)
        self._pipe = pipe if isinstance(pipe, asyncio.ReadTransport) else None

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        super().pipe_data_received(fd, data)
        pipe = self._pipe
        if fd != STDOUT or pipe is None or self._resume is not None or not pipe.is_reading():
            return
        now = self._event_loop.time()
        quiet = now - self._last_read > self._pace * QUIET_PACES
        self._last_read = now
        if quiet:
            return
        pipe.pause_reading()
        self._resume = self._event_loop.call_later(self._pace, self._read_again)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == STDOUT:
            self._pipe = None
            if self._resume is not None:
                self._resume.cancel()
                self._resume = None
        super().pipe_connection_lost(fd, exc)

    def _read_again(self) -> None:
        self._resume = None
        pipe = self._pipe
        if pipe is not None and not pipe.is_closing():
            pipe.resume_reading()


async def spawn_paced(
    argv: Sequence[str], *, pace: float, **options: Any
) -> aio_subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, **options)``, its stdout paced when ``pace`` > 0."""
    if pace <= 0:
        return await asyncio.create_subprocess_exec(*argv, **options)
    loop = asyncio.get_running_loop()
    limit = options.pop("limit", 2**16)
    transport, protocol = await loop.subprocess_exec(
        lambda: PacedStdout(pace, limit, loop), *argv, **options
    )
    return aio_subprocess.Process(transport, protocol, loop)
