"""The slots of one engine (owners, parked conversations, which are idle) and the engine I/O
that hands one to a request: park the leaving session's KV, erase it, restore the arriving
session's own, in the order ``rules.hand_over`` gives (docs/SCHEDULER.md, "Slot ownership",
"Parking" and "The view of the idle slots")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.workers.proxy.scheduler import rules
from backend.workers.proxy.scheduler.engine_access import EngineAccess
from backend.workers.proxy.scheduler.kv_parking import Parking, parked_name
from backend.workers.proxy.scheduler.rules import SlotSample
from backend.workers.proxy.scheduler.slot_book import SlotBook
from backend.workers.proxy.scheduler.slot_view import SlotView
from backend.workers.proxy.scheduler.tickets import Ticket

log = logging.getLogger(__name__)


class SlotKeeper:
    """Who owns each slot of ``engine`` (``book``), whose KV waits in a file (``parking``),
    which slots are idle (``view``), and the hand-over of a slot; file deletions run in the
    scheduler's ``tasks``."""

    def __init__(
        self, engine: str, access: EngineAccess, tasks: TaskSet, *, clock: Clock, affinity: bool
    ) -> None:
        self.book = SlotBook(affinity=affinity)
        self.parking = Parking()
        self.view = SlotView(access, clock, tasks)
        self._engine = engine
        self._access = access
        self._tasks = tasks

    async def give(self, ticket: Ticket, slot: int, *, parking: bool) -> None:
        """Give ``slot`` to ``ticket`` (``ticket.slot`` set), or leave it unpinned when the
        erase fails. ``parking``: whether KV may be parked and restored."""
        session = ticket.session
        plan = rules.hand_over(self.book.owners, slot, session, parking=parking)
        if plan.park is not None:
            await self._park(slot, plan.park)
        if plan.erase and not await self._erase(slot, session):
            return
        if plan.restore:
            await self._unpark(slot, session)
        self.book.owned_by(slot, session)
        ticket.slot = slot

    async def sample(
        self, held: Callable[[], Iterable[int]], *, afresh: bool
    ) -> tuple[SlotSample | None, bool]:
        """The idle slots a decision may hand out, less the ones PAIR's running requests hold
        once the answer is in (``held()``: one admitted moments ago may not have reached the
        engine, which then still shows its slot idle; one that ended meanwhile holds none), and
        whether they came from the view rather than a read (``afresh``: read)."""
        sample = None if afresh else self.view.recalled()
        recalled = sample is not None
        if sample is None:
            sample = await self.view.read()
        if sample is None or sample.ids is None:
            self.book.free = None
            return sample, recalled
        handed = self.book.sampled(sample.ids, held())
        return SlotSample(max(0, min(sample.idle, handed)), None), recalled

    def take_now(self, held: Iterable[int], session: str | None, *, parking: bool) -> int | None:
        """The slot ``session`` gets from a view still trusted, taken, when handing it over
        needs no engine I/O (its own slot or a fresh one, no parked KV to restore); None when
        a decision pass must read the engine or prepare the slot."""
        sample = self.view.recalled()
        if sample is None or sample.ids is None:
            return None
        self.book.sampled(sample.ids, held)
        slot = self.book.choose(session)
        self.book.free = None
        if slot is None:
            return None
        plan = rules.hand_over(self.book.owners, slot, session, parking=parking)
        if plan.erase or (plan.restore and self.parking.file_of(session) is not None):
            return None
        self.book.owned_by(slot, session)
        return slot

    def forget(self) -> None:
        """The engine relaunched: every slot is fresh and every parked file stale."""
        self.book.forget()
        self.view.doubt()
        self._discard(self.parking.clear())

    async def _erase(self, slot: int, session: str | None) -> bool:
        try:
            await self._access.erase(slot)
        except Exception as exc:
            log.warning(
                "erasing slot %d of %s failed (%s); running unpinned", slot, self._engine, exc
            )
            self.book.unknown(slot)
            self.view.doubt()  # the request runs where the engine puts it
            return False
        log.debug("erased slot %d of %s before handing it to %s", slot, self._engine, session)
        return True

    async def _park(self, slot: int, session: str) -> None:
        """Save the KV of the session leaving ``slot``."""
        try:
            size = await self._access.save(slot, parked_name(session))
        except Exception as exc:
            log.info(
                "parking slot %d of %s failed (%s): its KV is dropped", slot, self._engine, exc
            )
            return
        self._discard(self.parking.parked(session, size))

    async def _unpark(self, slot: int, session: str | None) -> None:
        """Load ``session``'s parked KV into ``slot`` (fresh or just erased) if it has one."""
        name = self.parking.file_of(session)
        if name is None or session is None:
            return
        try:
            await self._access.restore(slot, name)
        except Exception as exc:
            log.info(
                "restoring a parked KV into slot %d of %s failed (%s)", slot, self._engine, exc
            )
        stale = self.parking.restored(session)
        self._discard([stale] if stale else [])

    def _discard(self, names: list[str]) -> None:
        if names:
            self._tasks.spawn(self._access.discard(names), name=f"scheduler:{self._engine}:discard")
