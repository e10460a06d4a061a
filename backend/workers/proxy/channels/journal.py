"""The worker's write-ahead journal of job ends: a job's terminal event is in a file before the
last byte of its answer goes out, so a broker (or this worker) killed the instant a client has
its answer loses nothing: the next broker applies the journal when it starts.

One synchronous ``os.write`` of the event's line on an ``O_APPEND`` descriptor: the bytes are
in the kernel's page cache when it returns, which a ``kill -9`` of any process does not undo. A
power loss can still lose the last lines: there is no ``fsync`` per request (one costs a disk
flush, milliseconds, on every answer), and the jobs history is a record, not a ledger.

The journal is cut into segments (``<run id>.<n>.jsonl``): the live one is sealed every
``SEAL_S`` it has events (or once it reaches ``MAX_EVENTS`` or ``MAX_BYTES``), and a sealed
segment is deleted once the broker confirms that every event sent before is in its store
(``trim``, in the background, never on a client's path).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from backend.protocol import errors
from backend.protocol.types.jobs import JobEvent

log = logging.getLogger(__name__)

# Returns once the broker has stored every job event sent before the call (raises RpcError).
Stored = Callable[[], Awaitable[None]]

MAX_EVENTS = 10_000
MAX_BYTES = 4 * 1024 * 1024
# How often the live segment is sealed and the broker asked to confirm it (when it has events).
SEAL_S = 1.0
# The longest one confirmation is waited for; unconfirmed segments stay for the next try.
STORED_WAIT_S = 1.0
SUFFIX = ".jsonl"
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class JobJournal:
    """Owns this run's segment files in ``folder`` (created 0700, files 0600) and the descriptor
    of the live one."""

    def __init__(
        self,
        folder: Path,
        run_id: str,
        *,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._folder = folder
        self._run_id = run_id
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._encoder = msgspec.json.Encoder()
        self._number = 0
        self._events = 0
        self._bytes = 0
        self._failing = False
        self.sealed: list[Path] = []
        self.live = self._segment(1)
        # Set by the first append after ``keep_trimmed`` found nothing to do: it rests till then.
        self._appended: asyncio.Future[None] | None = None
        self._fd: int | None = os.open(self.live, _FLAGS, 0o600)

    def append(self, event: JobEvent) -> None:
        """Write ``event`` as one line (in the page cache on return); a write that fails is
        logged once until one succeeds, and the answer goes on."""
        line = self._encoder.encode(event) + b"\n"
        try:
            if self._fd is None:
                self._fd = os.open(self.live, _FLAGS, 0o600)
            os.write(self._fd, line)
        except OSError as exc:
            if not self._failing:
                log.warning("the jobs journal cannot be written (%s): job ends not journaled", exc)
            self._failing = True
            return
        self._failing = False
        self._events += 1
        self._bytes += len(line)
        appended = self._appended
        if appended is not None:
            self._appended = None
            if not appended.done():
                appended.set_result(None)
        if self._events >= self._max_events or self._bytes >= self._max_bytes:
            self.seal()

    def seal(self) -> None:
        """Close the live segment (kept until the broker confirms it) and start the next one."""
        if self._events == 0:
            return
        self._close()
        self.sealed.append(self.live)
        self.live = self._segment(self._number + 1)
        self._events = self._bytes = 0

    async def trim(self, stored: Stored, flush: Callable[[], None] = lambda: None) -> bool:
        """Seal the live segment, then delete every sealed one once the broker confirms it
        stored their events; whether it did (an unconfirmed segment stays). ``flush`` first
        tells the broker every event still waiting in the job log's batch (a sealed segment
        may hold one), so the confirmation covers them."""
        self.seal()
        if not self.sealed:
            return True
        confirmed = list(self.sealed)
        flush()
        try:
            await stored()
        except errors.RpcError as exc:
            log.debug("jobs journal: the broker did not confirm its store: %s", exc)
            return False
        for path in confirmed:
            path.unlink(missing_ok=True)
        self.sealed = [path for path in self.sealed if path not in confirmed]
        return True

    async def keep_trimmed(
        self, stored: Stored, flush: Callable[[], None], interval: float = SEAL_S
    ) -> None:
        """``trim`` every ``interval`` seconds until cancelled; while nothing is left to trim
        (no event since, nothing sealed), asleep until the next event instead (an idle worker
        is not woken every second for nothing)."""
        try:
            while True:
                await asyncio.sleep(interval)
                await self.trim(stored, flush)
                if not self.sealed and self._events == 0:
                    appended = asyncio.get_running_loop().create_future()
                    self._appended = appended
                    try:
                        await appended
                    finally:
                        self._appended = None
        finally:
            self._close()

    def close(self) -> None:
        """Close the live segment's descriptor (its file stays for the next broker)."""
        self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _segment(self, number: int) -> Path:
        self._number = number
        return self._folder / f"{self._run_id}.{number}{SUFFIX}"
