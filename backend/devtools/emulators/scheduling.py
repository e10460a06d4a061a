"""Slots and request bookkeeping shared by the emulators' schedulers."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import msgspec

from backend.core.clock import Clock

RequestState = Literal["queued", "running", "done", "cancelled", "failed"]
_FINISHED_KEPT = 500


class FifoSlots:
    """N parallel slots; waiters are served strictly first come, first served.

    A waiter that is cancelled leaves the queue without taking a slot, so a client that
    disconnects while queued never reaches the "engine".
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.busy = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Requests queued behind the busy slots."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        """Take a slot, waiting in line when all are busy."""
        if self.busy < self.capacity and not self.waiting:
            self.busy += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def release(self) -> None:
        """Give a slot back; the longest waiter gets it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: busy stays the same
                return
        self.busy = max(0, self.busy - 1)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the body of the ``async with``."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()


class RequestRecord(msgspec.Struct):
    """One request's life, with times on the emulator's monotonic clock (seconds)."""

    request_id: int
    model: str
    endpoint: str
    enqueued_at: float
    state: RequestState = "queued"
    instance: str | None = None
    started_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    cancelled_at: float | None = None
    tokens: int = 0
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The record as the introspection endpoint shows it."""
        return {
            "id": self.request_id,
            "model": self.model,
            "endpoint": self.endpoint,
            "instance": self.instance,
            "state": self.state,
            "enqueued_at": self.enqueued_at,
            "started_at": self.started_at,
            "first_token_at": self.first_token_at,
            "finished_at": self.finished_at,
            "cancelled_at": self.cancelled_at,
            "tokens": self.tokens,
        }


class RequestLog:
    """Every request an emulator serves: open ones and the most recent finished ones."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._ids = itertools.count(1)
        self._open: dict[int, RequestRecord] = {}
        self._finished: collections.deque[RequestRecord] = collections.deque(maxlen=_FINISHED_KEPT)
        self.counts = {"done": 0, "cancelled": 0, "failed": 0}

    def open(self, model: str, endpoint: str) -> RequestRecord:
        """Record a request that has just arrived."""
        record = RequestRecord(next(self._ids), model, endpoint, self._clock.monotonic())
        self._open[record.request_id] = record
        return record

    def started(self, record: RequestRecord, instance: str) -> None:
        """The request holds a slot now."""
        record.state = "running"
        record.instance = instance
        record.started_at = self._clock.monotonic()

    def token(self, record: RequestRecord) -> None:
        """One more token went out."""
        record.tokens += 1
        if record.first_token_at is None:
            record.first_token_at = self._clock.monotonic()

    def generated(self, record: RequestRecord) -> None:
        """The last token is out (called while the request still holds its slot)."""
        record.finished_at = self._clock.monotonic()

    def close(self, record: RequestRecord, state: RequestState) -> None:
        """The request ended (done, cancelled or failed); idempotent."""
        if self._open.pop(record.request_id, None) is None:
            return
        now = self._clock.monotonic()
        record.state = state
        if state != "done" or record.finished_at is None:
            record.finished_at = now
        if state == "cancelled":
            record.cancelled_at = now
        self.counts[state] += 1
        self._finished.append(record)

    @contextlib.contextmanager
    def tracking(self, record: RequestRecord) -> Iterator[RequestRecord]:
        """Close ``record`` when the block ends: done, cancelled (disconnect) or failed."""
        try:
            yield record
        except (asyncio.CancelledError, ConnectionResetError):
            self.close(record, "cancelled")
            raise
        except BaseException:
            self.close(record, "failed")
            raise
        else:
            self.close(record, "done")

    def snapshot(self) -> dict[str, Any]:
        """Open and recent requests plus counters, for ``/_emulator/state``."""
        open_records = sorted(self._open.values(), key=lambda record: record.request_id)
        return {
            "active": [r.as_json() for r in open_records if r.state == "running"],
            "queued": [r.as_json() for r in open_records if r.state == "queued"],
            "finished": [r.as_json() for r in self._finished],
            "completed": self.counts["done"],
            "cancelled": self.counts["cancelled"],
            "failed": self.counts["failed"],
        }


REAPER_MAX_WAIT = 3600.0


async def reap_until_cancelled(
    reap_expired: Callable[[], float | None], wake: Callable[[], asyncio.Event]
) -> None:
    """Call ``reap_expired`` whenever the next expiry it names is due or ``wake()`` is set.

    ``wake`` is read anew each round because the schedulers replace the event to signal.
    """
    while True:
        event = wake()
        delay = reap_expired()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(delay or REAPER_MAX_WAIT, REAPER_MAX_WAIT)):
                await event.wait()
