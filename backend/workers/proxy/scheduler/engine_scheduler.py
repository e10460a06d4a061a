"""One local engine's scheduler: who runs now, on which slot, and when the model may change.

Every request PAIR sends this node's engine (from a front door or relayed from a peer) waits
here until it is admitted, and every exclusive operation the broker runs on the engine waits
here until the engine is drained. The rules are in docs/SCHEDULER.md (after the otto-brain
scheduler): capacity (the slot ceiling, bounded by the idle slots the engine reports, polled
while everything waits), turns on a one-model engine (a burst shares one; a turn begins only
on a drained engine and absorbs its model's arrivals only at the head of the queue), exclusive
operations alone on a drained engine, slot ownership (a distinct idle slot per request; a
handoff to another session parks and erases the slot's KV first; the same session keeps it;
fresh slots are never erased; keyless owners are nobody's; owners are forgotten on a relaunch)
and affinity (the session whose KV an idle slot holds goes first). A request leaves the queue
the moment its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.protocol.types import (
    EngineName,
    ExclusiveOperation,
    ModelQueue,
    SchedulerState,
)
from backend.workers.proxy.scheduler.kv_parking import Parking, parked_name
from backend.workers.proxy.scheduler.slot_book import SlotBook

log = logging.getLogger(__name__)

COMPLETION = "completion"
# What a decision pass does next: stop, decide again, admit (after a new turn began: resample).
Step = Literal["stop", "again", "admit", "new-turn"]
SLOT_POLL_S = 0.5
# The ceiling of an engine whose slot count is not known (a known count is the ceiling).
MAX_CONCURRENCY = 64


class LoadFailed(Exception):
    """The engine would not load a model; the message is the engine's reason."""


@dataclass(frozen=True, slots=True)
class SlotSample:
    """The engine's idle slots at one moment: how many, and their ids when it names them."""

    idle: int
    ids: tuple[int, ...] | None = None


class EngineAccess(Protocol):
    """What the scheduler asks of its engine (HTTP to the engine, RPC to the broker)."""

    async def free_slots(self) -> SlotSample | None:
        """The idle slots now, or None when they cannot be read (then the ceiling decides)."""
        ...

    async def erase(self, slot: int) -> None:
        """Erase one slot's KV; raises when the engine did not."""
        ...

    async def load(self, model: str) -> int:
        """Relaunch the drained engine with ``model``; its new instance, or ``LoadFailed``."""
        ...

    async def save(self, slot: int, filename: str) -> int:
        """Park ``slot``'s KV in ``filename``; the bytes written (raises when it did not)."""
        ...

    async def restore(self, slot: int, filename: str) -> None:
        """Load a parked KV into ``slot`` (raises when it did not)."""
        ...

    async def discard(self, filenames: list[str]) -> None:
        """Delete parked files nobody needs any more."""
        ...


@dataclass(frozen=True, slots=True)
class EngineShape:
    """What the routing table says about the engine (``RouteTarget`` of the local node)."""

    slots: int = 1
    model_slots: Mapping[str, int] = field(default_factory=dict)
    single_model: bool = False
    resident: tuple[str, ...] = ()
    instance: int = 0
    pinning: bool = False
    slots_known: bool = True
    parking: bool = False


@dataclass(eq=False)
class Ticket:
    """One request or exclusive operation at the scheduler; ``slot`` once admitted (pinned)."""

    model: str
    kind: str = COMPLETION
    session: str | None = None
    slot: int | None = None
    admitted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # Called once if a decision pass ends with it still queued (it waits for capacity).
    on_wait: Callable[[], None] | None = None

    @property
    def exclusive(self) -> bool:
        """Whether it must run alone on a drained engine."""
        return self.kind != COMPLETION


class _Running:
    """The admitted tickets, with a count per model kept as they come and go (asked on every
    admission)."""

    __slots__ = ("_per_model", "_tickets")

    def __init__(self) -> None:
        self._tickets: set[Ticket] = set()
        self._per_model: Counter[str] = Counter()

    def add(self, ticket: Ticket) -> None:
        if ticket not in self._tickets:
            self._tickets.add(ticket)
            self._per_model[ticket.model] += 1

    def discard(self, ticket: Ticket) -> None:
        if ticket in self._tickets:
            self._tickets.remove(ticket)
            self._per_model[ticket.model] -= 1
            if not self._per_model[ticket.model]:
                del self._per_model[ticket.model]

    def count(self, model: str) -> int:
        """How many of ``model``'s run."""
        return self._per_model.get(model, 0)

    def __contains__(self, ticket: object) -> bool:
        return ticket in self._tickets

    def __iter__(self) -> Iterator[Ticket]:
        return iter(self._tickets)

    def __len__(self) -> int:
        return len(self._tickets)


class EngineScheduler:
    """The queue, the current turn, the running set and the slot owners of one engine."""

    def __init__(
        self,
        engine: str,
        access: EngineAccess,
        *,
        clock: Clock,
        on_change: Callable[[], None] = lambda: None,
        poll_s: float = SLOT_POLL_S,
        affinity: bool = True,
    ) -> None:
        self.engine = engine
        self._affinity = affinity
        self._access = access
        self._clock = clock
        self._on_change = on_change
        self._poll_s = poll_s
        self._shape = EngineShape()
        self.queue: list[Ticket] = []
        self._batch: list[Ticket] = []
        self._running = _Running()
        self._turn: str | None = None
        self.last_turn: str | None = None
        self._active: Ticket | None = None
        self._loading: str | None = None
        self.resident: str | None = None
        self._instance = 0
        self._retired: set[int] = set()
        self.slots = SlotBook(affinity=affinity)
        self.parking = Parking()
        self._idle: int | None = None
        self._busy = False
        self._dirty = False
        self._polling = False
        self._tasks = TaskSet(f"scheduler:{engine}")
        self._done: asyncio.Future[None] | None = None

    # What the routing table says.

    def configure(self, shape: EngineShape) -> None:
        """Adopt the table's view of the engine; a relaunch PAIR's scheduler did not cause
        (another instance) forgets the slot owners and takes the table's resident model."""
        previous = self._shape
        self._shape = shape
        relaunched = (
            shape.instance != 0
            and shape.instance != self._instance
            and shape.instance not in self._retired
            and self._loading is None
        )
        if relaunched:
            if self._instance:
                self._retired.add(self._instance)
            self._instance = shape.instance
            self._forget_slots()
            self.resident = shape.resident[0] if shape.resident else None
        elif self.resident is None and shape.resident and self._loading is None:
            self.resident = shape.resident[0]
        if shape != previous:
            self._announce()
            self._kick()

    # Requests and operations.

    async def admit(
        self,
        model: str,
        *,
        session: str | None = None,
        kind: str = COMPLETION,
        on_wait: Callable[[], None] | None = None,
    ) -> Ticket:
        """Wait for this request's (or operation's) turn; the caller must ``release`` it.

        Raises ``LoadFailed`` when its model would not load. Cancelling the caller takes it
        out of the queue at once (or releases it, if it was admitted in the meantime).
        ``on_wait`` is called once if a decision passes it over (it is left waiting).
        """
        ticket = self.admit_now(model, session=session) if kind == COMPLETION else None
        if ticket is not None:
            return ticket
        ticket = Ticket(model, kind, session)
        # Kept only while it waits: the callback usually refers to what holds the ticket.
        ticket.on_wait = on_wait
        self.queue.append(ticket)
        self._announce()
        # Deferred one loop turn, so a burst submitted together shares one decision.
        asyncio.get_running_loop().call_soon(self._kick)
        try:
            await asyncio.shield(ticket.admitted)
        except asyncio.CancelledError:
            self._leave(ticket)
            raise
        finally:
            ticket.on_wait = None
        return ticket

    def admit_now(self, model: str, *, session: str | None = None) -> Ticket | None:
        """A completion's ticket, admitted without a decision pass when a pass could only
        admit it at once: on an engine that holds many models and pins no slots, with nothing
        queued ahead of it, no operation holding the engine and room for its model (the
        common case; it saves a task and a wait per request). None otherwise: ``admit`` it.
        The caller must ``release`` a ticket it gets."""
        shape = self._shape
        if shape.single_model or shape.pinning or self.queue:
            return None
        if self._active is not None or self._batch:
            return None
        if self._running.count(model) >= self._ceiling(model):
            return None
        ticket = Ticket(model, COMPLETION, session, admitted=self._admitted())
        self._running.add(ticket)
        self._announce()
        return ticket

    def _admitted(self) -> asyncio.Future[None]:
        """The future of every ticket admitted at once: done, shared (never set again: only a
        queued ticket's is)."""
        done = self._done
        if done is None:
            done = self._done = asyncio.get_running_loop().create_future()
            done.set_result(None)
        return done

    def release(self, ticket: Ticket) -> None:
        """The request or operation ended (any way): its capacity goes to the next."""
        self._leave(ticket)

    def forget_slots(self) -> None:
        """Drop every slot owner (the engine's slots did not survive a relaunch)."""
        self._forget_slots()

    def close(self) -> None:
        """The engine is gone: fail whatever still waits."""
        for ticket in [*self.queue, *self._batch]:
            if not ticket.admitted.done():
                ticket.admitted.set_exception(LoadFailed(f"{self.engine} is no longer running"))
        self.queue.clear()
        self._batch.clear()

    async def aclose(self) -> None:
        """Close and end the scheduler's own tasks."""
        self.close()
        await self._tasks.close(timeout=1.0)

    def _leave(self, ticket: Ticket) -> None:
        changed = False
        for place in (self.queue, self._batch):
            if ticket in place:
                place.remove(ticket)
                changed = True
        if ticket in self._running:
            self._running.discard(ticket)
            changed = True
        if self._active is ticket:
            self._active = None
            changed = True
        if not ticket.admitted.done():
            ticket.admitted.cancel()
        if changed:
            self._announce()
            # Capacity freed matters only to what waits (a one-model engine may end its turn).
            if self.queue or self._batch or self._shape.single_model:
                self._kick()

    # Decisions.

    def _kick(self) -> None:
        """Ask for a decision; calls during a pass collapse into one more pass after it."""
        if self._busy:
            self._dirty = True
            return
        self._busy = True
        self._tasks.spawn(self._dispatch(), name=f"scheduler:{self.engine}:pass")

    async def _dispatch(self) -> None:
        try:
            while True:
                self._dirty = False
                try:
                    await self._pass()
                except Exception:
                    log.exception("scheduler pass of %s failed", self.engine)
                if not self._dirty:
                    return
        finally:
            self._busy = False
            self._passed_over()

    def _passed_over(self) -> None:
        """Tell the tickets a pass left queued that they wait."""
        for ticket in [*self.queue, *self._batch]:
            waiting, ticket.on_wait = ticket.on_wait, None
            if waiting is not None and not ticket.admitted.done():
                try:
                    waiting()
                except Exception:  # one caller's trouble must not cost the others theirs
                    log.exception("a waiting request's callback failed on %s", self.engine)

    async def _pass(self) -> None:
        """Start as many as residency, exclusivity, the turn and capacity allow, then return."""
        sample: SlotSample | None = None
        sampled = False
        started_here = 0
        self.slots.free = None
        while True:
            if self._active is not None:
                return
            step = await (self._turn_step() if self._shape.single_model else self._models_step())
            if step == "stop":
                return
            if step == "again":
                continue
            if step == "new-turn":
                # A new turn reads the engine afresh (a relaunch has all its slots back).
                sampled, started_here = False, 0
            if not sampled:
                sample = await self._sample()
                sampled = True
            job = self._claim(sample, started_here)
            if job is None:
                if not self._running and sample is not None:
                    self._poll()
                return
            started_here += 1
            await self._start(job)

    async def _turn_step(self) -> Step:
        """A one-model engine: begin a turn on a drained engine (loading its model), keep it
        open while its requests or the queue's head of its model remain, end it otherwise."""
        started = False
        if self._turn is None:
            if self._running or not self.queue:
                return "stop"
            pick = self._pick()
            if pick.exclusive:
                await self._start_exclusive(pick)
                return "stop"
            if self.resident != pick.model and not await self._switch(pick.model):
                return "again"
            self._turn = self.last_turn = pick.model
            self._batch = self._take_turn(pick.model)
            self._announce()
            started = True
        if not self._batch and not self._absorb_head():
            if self._running:
                return "stop"
            self._turn = None
            self._announce()
            return "again" if self.queue else "stop"
        return "new-turn" if started else "admit"

    async def _models_step(self) -> Step:
        """An engine that holds many models: an exclusive operation at the head waits for the
        engine to drain; anything else may be admitted."""
        head = self.queue[0] if self.queue else None
        if head is None:
            return "stop"
        if head.exclusive:
            if not self._running:
                await self._start_exclusive(head)
            return "stop"
        return "admit"

    def _pick(self) -> Ticket:
        """The next turn: from the requests ahead of the first exclusive operation, another
        model than the one that just ran if one waits (so two models alternate), else the
        head; an exclusive operation at the head goes next."""
        segment = self._segment(self.queue)
        if not segment:
            return self.queue[0]
        return next((t for t in segment if t.model != self.last_turn), segment[0])

    @staticmethod
    def _segment(tickets: Iterable[Ticket]) -> list[Ticket]:
        found = []
        for ticket in tickets:
            if ticket.exclusive:
                break
            found.append(ticket)
        return found

    def _take_turn(self, model: str) -> list[Ticket]:
        taken = [t for t in self._segment(self.queue) if t.model == model]
        for ticket in taken:
            self.queue.remove(ticket)
        return taken

    def _absorb_head(self) -> bool:
        head = self.queue[0] if self.queue else None
        if head is None or head.exclusive or head.model != self._turn:
            return False
        self.queue.remove(head)
        self._batch.append(head)
        return True

    async def _switch(self, model: str) -> bool:
        """Load ``model`` on the drained engine; on failure fail its queued requests."""
        self._loading = model
        self._announce()
        try:
            instance = await self._access.load(model)
        except LoadFailed as exc:
            self._fail_model(model, str(exc))
            return False
        except Exception as exc:  # a broken link to the broker fails the same way
            self._fail_model(model, f"could not load {model}: {exc}")
            return False
        finally:
            self._loading = None
            self._announce()
        if self._instance:
            self._retired.add(self._instance)
        self._instance = instance
        self.resident = model
        self._forget_slots()
        return True

    def _fail_model(self, model: str, reason: str) -> None:
        log.warning("%s could not load %s: %s", self.engine, model, reason)
        failed = [t for t in self.queue if t.model == model and not t.exclusive]
        for ticket in failed:
            self.queue.remove(ticket)
            if not ticket.admitted.done():
                ticket.admitted.set_exception(LoadFailed(reason))
        self._announce()

    def _ceiling(self, model: str | None) -> int:
        if not self._shape.slots_known:
            return MAX_CONCURRENCY
        slots = self._shape.model_slots.get(model, self._shape.slots) if model else 0
        return max(1, slots or self._shape.slots)

    def _claim(self, sample: SlotSample | None, started_here: int) -> Ticket | None:
        """The next request with room, by affinity; taken out of its queue."""
        if sample is not None and sample.idle - started_here < 1:
            return None
        if self._shape.single_model:
            if len(self._running) >= self._ceiling(self._turn):
                return None
            pool = self._batch
        else:
            running = self._running
            pool = [
                t
                for t in self._segment(self.queue)
                if running.count(t.model) < self._ceiling(t.model)
            ]
        if not pool:
            return None
        chosen = self._by_affinity(pool)
        (self._batch if self._shape.single_model else self.queue).remove(chosen)
        return chosen

    def _by_affinity(self, pool: list[Ticket]) -> Ticket:
        if not self._affinity:
            return pool[0]
        held_by = self.slots.holders()
        for ticket in pool:
            if ticket.session is not None and ticket.session in held_by:
                return ticket
        warm = {t.session for t in self._running if t.session is not None}
        return next((t for t in pool if t.session in warm), pool[0])

    async def _sample(self) -> SlotSample | None:
        if not self._shape.pinning:
            return None
        try:
            sample = await self._access.free_slots()
        except Exception:
            sample = None
        if sample is None:
            self._idle = None
            return None
        self._idle = sample.idle
        if sample.ids is None:
            self.slots.free = None
            return sample
        held = (t.slot for t in self._running if t.slot is not None)
        handed = self.slots.sampled(sample.ids, held)
        return SlotSample(max(0, min(sample.idle, handed)), None)

    def _poll(self) -> None:
        """Nothing of ours runs and the engine has no idle slot: look again shortly."""
        if self._polling:
            return
        self._polling = True

        async def later() -> None:
            try:
                await self._clock.sleep(self._poll_s)
            finally:
                self._polling = False
            self._kick()

        self._tasks.spawn(later(), name=f"scheduler:{self.engine}:poll")

    async def _start_exclusive(self, ticket: Ticket) -> None:
        if ticket in self.queue:
            self.queue.remove(ticket)
        if ticket.admitted.done():
            return
        self._running.add(ticket)
        self._active = ticket
        ticket.admitted.set_result(None)
        self._announce()

    async def _start(self, ticket: Ticket) -> None:
        if ticket.admitted.done():  # its caller left while it was being claimed
            return
        self._running.add(ticket)
        slot = self.slots.choose(ticket.session) if self._shape.pinning else None
        if slot is not None:
            previous = self.slots.owners.get(slot)
            own = slot in self.slots.owners and previous == ticket.session
            handoff = self.slots.handoff(slot, ticket.session)
            if handoff:
                await self._park(slot, previous)
            if not handoff or await self._erase(slot, ticket.session):
                if not own:
                    await self._unpark(slot, ticket.session)
                self.slots.owned_by(slot, ticket.session)
                ticket.slot = slot
        if ticket.admitted.done():  # cancelled while its slot was being erased
            self._running.discard(ticket)
            return
        ticket.admitted.set_result(None)
        self._announce()

    async def _erase(self, slot: int, session: str | None) -> bool:
        try:
            await self._access.erase(slot)
        except Exception as exc:
            log.warning(
                "erasing slot %d of %s failed (%s); running unpinned", slot, self.engine, exc
            )
            self.slots.unknown(slot)
            return False
        log.debug("erased slot %d of %s before handing it to %s", slot, self.engine, session)
        return True

    async def _park(self, slot: int, session: str | None) -> None:
        """Save the KV of the session leaving ``slot`` (a keyless one is nobody's to keep)."""
        if session is None or not self._shape.parking or not self._affinity:
            return
        name = parked_name(session)
        try:
            size = await self._access.save(slot, name)
        except Exception as exc:
            log.info("parking slot %d of %s failed (%s): its KV is dropped", slot, self.engine, exc)
            return
        self._discard(self.parking.parked(session, size))

    async def _unpark(self, slot: int, session: str | None) -> None:
        """Load ``session``'s parked KV into ``slot`` (fresh or just erased) if it has one."""
        name = self.parking.file_of(session)
        if name is None or session is None or not self._shape.parking:
            return
        try:
            await self._access.restore(slot, name)
        except Exception as exc:
            log.info("restoring a parked KV into slot %d of %s failed (%s)", slot, self.engine, exc)
        stale = self.parking.restored(session)
        self._discard([stale] if stale else [])

    def _discard(self, names: list[str]) -> None:
        if names:
            self._tasks.spawn(self._access.discard(names), name=f"scheduler:{self.engine}:discard")

    def _forget_slots(self) -> None:
        self.slots.forget()
        self._discard(self.parking.clear())

    # Reporting.

    def _announce(self) -> None:
        try:  # on every admission and release: no context manager
            self._on_change()
        except Exception:
            log.exception("the scheduler's change callback failed")

    @property
    def active(self) -> bool:
        """Whether it has anything: queued, running, an operation, a turn or a load."""
        return bool(self.queue or self._batch or self._running or self._turn or self._loading)

    def state(self) -> SchedulerState:
        """A snapshot for ``engine:scheduler``."""
        queues: dict[str, list[int]] = {}
        for ticket in [*self._batch, *self.queue]:
            if not ticket.exclusive:
                queues.setdefault(ticket.model, [0, 0])[1] += 1
        for ticket in self._running:
            if not ticket.exclusive:
                queues.setdefault(ticket.model, [0, 0])[0] += 1
        exclusive: ExclusiveOperation | None = None
        if self._active is not None:
            exclusive = ExclusiveOperation(kind=self._active.kind, model=self._active.model or None)
        elif self._loading is not None:
            exclusive = ExclusiveOperation(kind="switch", model=self._loading)
        ceiling = self._ceiling(self._turn or self.resident)
        return SchedulerState(
            engine=EngineName(self.engine),
            single_model=self._shape.single_model,
            ceiling=ceiling,
            idle=self._idle,
            running=sum(1 for t in self._running if not t.exclusive),
            waiting=sum(1 for t in [*self._batch, *self.queue] if not t.exclusive),
            queues=[
                ModelQueue(model=m, running=c[0], waiting=c[1]) for m, c in sorted(queues.items())
            ],
            resident=self.resident,
            turn=self._turn,
            exclusive=exclusive,
            exclusive_waiting=sum(1 for t in self.queue if t.exclusive),
            slot_owners=(
                self.slots.counts(self._shape.slots, parked=len(self.parking))
                if self._shape.pinning
                else None
            ),
        )
