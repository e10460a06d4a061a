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
"""

from __future__ import annotations

from backend.core.clock import Clock
from backend.workers.proxy.scheduler.engine_access import EngineAccess
from backend.workers.proxy.scheduler.rules import SlotSample

# How long a read of the engine's slots is trusted (with PAIR's own comings and goings applied):
# traffic PAIR did not send is noticed this late at most, and PAIR's own requests that come
# closer together than this (an agent's loop, a chat's quick turns) are sent without a read.
VIEW_FRESH_S = 1.0


class SlotView:
    """The idle slot ids of one engine: the last read, kept current by PAIR's own requests."""

    def __init__(self, access: EngineAccess, clock: Clock, *, fresh_s: float = VIEW_FRESH_S):
        self._access = access
        self._clock = clock
        self._fresh_s = fresh_s
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
        if idle is None or self._clock.monotonic() - self._read_at > self._fresh_s:
            return None
        self.reported = len(idle)
        return SlotSample(len(idle), tuple(sorted(idle)))

    async def read(self) -> SlotSample | None:
        """Ask the engine (``GET /slots``); the view starts again from its answer. None when
        it cannot be read (then the ceiling alone decides)."""
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
