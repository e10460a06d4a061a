"""Which of an engine's slots are idle, as its scheduler knows them between reads of the slot
list (docs/SCHEDULER.md, "Capacity").

Reading llama-server's ``GET /slots`` before every admission costs a lone request a round trip
to the engine before it is sent. The view keeps the last read's idle ids and adds back each slot
a request of PAIR's left when that request ended (the engine finished it, so the slot is idle
again): PAIR's own traffic needs no read to be known. A read is what notices traffic PAIR did not
send, so the view is trusted only for ``fresh_s`` after it was read, and not at all once
something casts doubt on it: a relaunch, a request that ran unpinned (the engine chose its slot),
one that ended before the engine did (its client left mid-answer). A view that leaves a request
no room is read again before anyone waits on it (the scheduler's part).

So that PAIR's own steady traffic never waits for a read, a request let in by a view older than
``REFRESH_AFTER_S`` starts one in the background (``refresh_due``), and while a read is on its
way the view stays trusted, for ``TRUSTED_WHILE_READING_S`` after the last read at most: a
busy engine can take a second or more to list its slots, and every request waited for it.
Traffic PAIR did not send is then noticed once that read answers. There is never more than one
read at a time: a decision that needs one waits for the read already on its way.
"""

from __future__ import annotations

import asyncio

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.workers.proxy.scheduler.engine_access import EngineAccess
from backend.workers.proxy.scheduler.rules import SlotSample

# How long a read of the engine's slots is trusted (with PAIR's own comings and goings applied):
# traffic PAIR did not send is noticed this late at most, and PAIR's own requests that come
# closer together than this (an agent's loop, a chat's quick turns) are sent without a read.
VIEW_FRESH_S = 1.0
# A request let in by a view this old starts a read in the background.
REFRESH_AFTER_S = VIEW_FRESH_S / 2
# How long after the last read the view is trusted while the next is on its way (longer than
# the read's own limit, ``engine_access.SLOTS_TIMEOUT_S``, plus ``VIEW_FRESH_S``).
TRUSTED_WHILE_READING_S = 3.0


class SlotView:
    """The idle slot ids of one engine: the last read, kept current by PAIR's own requests."""

    def __init__(
        self, access: EngineAccess, clock: Clock, tasks: TaskSet, *, fresh_s: float = VIEW_FRESH_S
    ) -> None:
        self._access = access
        self._clock = clock
        self._tasks = tasks
        self._fresh_s = fresh_s
        self._reading: asyncio.Task[SlotSample | None] | None = None  # the read on its way
        self._idle: set[int] | None = None
        self._read_at = 0.0
        # Slots PAIR's requests left while a read was on its way: the engine may have answered
        # before it freed them, so they are added to what the read says.
        self._left_meanwhile: set[int] | None = None
        self._doubts = 0
        # What the engine last said (idle count) or the view's count since: for the report.
        self.reported: int | None = None

    def recalled(self) -> SlotSample | None:
        """The view as a sample when it may stand in for a read: read within ``fresh_s`` and
        not doubted since; None otherwise."""
        idle = self._idle
        if idle is None:
            return None
        age = self._clock.monotonic() - self._read_at
        if age > self._fresh_s and (self._reading is None or age > TRUSTED_WHILE_READING_S):
            return None
        self.reported = len(idle)
        return SlotSample(len(idle), tuple(sorted(idle)))

    def refresh_due(self) -> bool:
        """Whether a request the view let in should start a read in the background: the view
        is older than ``REFRESH_AFTER_S`` and no read is on its way."""
        return (
            self._idle is not None
            and self._reading is None
            and self._clock.monotonic() - self._read_at > REFRESH_AFTER_S
        )

    def refresh(self) -> None:
        """Start a read in the background (one already on its way is enough)."""
        if self._reading is None:
            self._reading = self._tasks.spawn(self._read(), name="slot-view:read")

    async def read(self) -> SlotSample | None:
        """Ask the engine (``GET /slots``), or wait for the read already on its way; the view
        starts again from its answer. None when it cannot be read (then the ceiling alone
        decides)."""
        self.refresh()
        assert self._reading is not None
        return await asyncio.shield(self._reading)

    async def _read(self) -> SlotSample | None:
        try:
            return await self._read_once()
        finally:
            self._reading = None

    async def _read_once(self) -> SlotSample | None:
        left: set[int] = set()
        self._left_meanwhile = left
        doubts, sent_at = self._doubts, self._clock.monotonic()
        try:
            sample = await self._access.free_slots()
        except Exception:
            sample = None
        finally:
            self._left_meanwhile = None
        ids = sample.ids if sample is not None else None
        # A doubt while the read was on its way (a relaunch, say) may postdate its answer.
        self._idle = {*ids, *left} if ids is not None and doubts == self._doubts else None
        self._read_at = sent_at
        self.reported = None if sample is None else sample.idle
        return sample

    def ended(self, slot: int | None, *, finished: bool) -> None:
        """A request of PAIR's left the engine: its slot is idle again when the engine
        ``finished`` it; an unpinned one (slot None) or one the engine may still be running
        leaves the view in doubt until the next read."""
        if slot is None or not finished:
            self.doubt()
            return
        if self._idle is not None:
            self._idle.add(slot)
        if self._left_meanwhile is not None:
            self._left_meanwhile.add(slot)

    def doubt(self) -> None:
        """Trust the view no more: the next decision reads the engine."""
        self._idle = None
        self._doubts += 1
