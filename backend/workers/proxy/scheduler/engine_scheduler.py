"""One local engine's scheduler: who runs now, on which slot, and when the model may change.

Every request PAIR sends this node's engine (from a front door or relayed from a peer) waits
here until it is admitted, and every exclusive operation the broker runs on the engine waits
here until the engine is drained. The rules (capacity, turns, exclusive operations, slot choice
and hand-over, affinity) are the pure functions of ``rules``; this class keeps the state they
read, does the I/O their steps name (sampling the engine's slots, loading a model, parking,
erasing and restoring a slot's KV) and settles the callers' futures. A request leaves the queue
the moment its caller is cancelled. docs/SCHEDULER.md describes the rules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from backend.common.tasks import TaskSet
from backend.core.clock import Clock
from backend.protocol.types.scheduler import SchedulerState
from backend.workers.proxy.scheduler import rules
from backend.workers.proxy.scheduler.engine_access import EngineAccess, LoadFailed
from backend.workers.proxy.scheduler.passes import Passes
from backend.workers.proxy.scheduler.report import scheduler_state
from backend.workers.proxy.scheduler.residency import Residency
from backend.workers.proxy.scheduler.rules import EngineShape, Moment, SlotSample
from backend.workers.proxy.scheduler.slot_keeper import SlotKeeper
from backend.workers.proxy.scheduler.tickets import (
    COMPLETION,
    RunningSet,
    Ticket,
    fail_queued,
    tell_waiting,
)

__all__ = [
    "COMPLETION",
    "EngineAccess",
    "EngineScheduler",
    "EngineShape",
    "LoadFailed",
    "SlotSample",
    "Ticket",
]

log = logging.getLogger(__name__)

SLOT_POLL_S = 0.5


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
        self._running = RunningSet()
        self._turn: str | None = None
        self.last_turn: str | None = None
        self._active: Ticket | None = None
        self._residency = Residency()
        self._tasks = TaskSet(f"scheduler:{engine}")
        self._passes = Passes(
            f"scheduler:{engine}", self._pass, self._passed_over, tasks=self._tasks, clock=clock
        )
        self._keeper = SlotKeeper(engine, access, self._tasks, clock=clock, affinity=affinity)
        self.slots = self._keeper.book
        self.parking = self._keeper.parking
        self._view = self._keeper.view
        self._done: asyncio.Future[None] | None = None

    # What the routing table says.

    def configure(self, shape: EngineShape) -> None:
        """Adopt the table's view of the engine; a relaunch PAIR's scheduler did not cause
        (another instance) forgets the slot owners and takes the table's resident model."""
        previous = self._shape
        self._shape = shape
        if self._residency.adopt(shape):
            self._forget_slots()
        if shape != previous:
            self._announce()
            self._passes.kick()

    # Requests and operations.

    async def admit(
        self,
        model: str,
        *,
        session: str | None = None,
        kind: str = COMPLETION,
        on_wait: Callable[[], None] | None = None,
        made: Callable[[Ticket], None] | None = None,
    ) -> Ticket:
        """Wait for this request's (or operation's) turn; the caller must ``release`` it.

        Raises ``LoadFailed`` when its model would not load. Cancelling the caller takes it
        out of the queue at once (or releases it, if it was admitted in the meantime).
        ``on_wait`` is called once if a decision passes it over (it is left waiting);
        ``made`` with the ticket when it has to queue (``ahead`` then says where it stands).
        """
        ticket = self.admit_now(model, session=session) if kind == COMPLETION else None
        if ticket is not None:
            return ticket
        ticket = Ticket(model, kind, session)
        # Kept only while it waits: the callback usually refers to what holds the ticket.
        ticket.on_wait = on_wait
        self.queue.append(ticket)
        if made is not None:
            made(ticket)
        self._announce()
        # Deferred one loop turn, so a burst submitted together shares one decision.
        asyncio.get_running_loop().call_soon(self._passes.kick)
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
        admit it at once (``rules.admits_at_once``: the common case; it saves a task and a
        wait per request). None otherwise: ``admit`` it. The caller must ``release`` a ticket
        it gets."""
        if self._shape.pinning or self._shape.single_model:
            return self._start_now(model, session)
        busy = self._active is not None or bool(self._batch)
        queued = bool(self.queue)
        if not rules.admits_at_once(self._shape, model, self._running, queued=queued, busy=busy):
            return None
        ticket = Ticket(model, COMPLETION, session, admitted=self._admitted())
        self._running.add(ticket)
        self._announce()
        return ticket

    def _start_now(self, model: str, session: str | None) -> Ticket | None:
        """``admit_now`` on a one-model or pinning engine: when no pass runs, the rules would
        start this request first (``rules.starts_at_once``) and its slot is known idle with
        nothing to do first (``SlotKeeper.take_now``)."""
        if self._passes.running or not rules.starts_at_once(self._moment(), model):
            return None
        slot = None
        if self._shape.pinning:
            parking = self._shape.parking and self._affinity
            slot = self._keeper.take_now(self._held(), session, parking=parking)
            if slot is None:
                return None
            if self._view.refresh_due():  # read again before the view goes stale
                self._view.refresh()
        ticket = Ticket(model, COMPLETION, session, slot, admitted=self._admitted())
        if self._shape.single_model and self._turn is None:
            self._turn = self.last_turn = model
        self._running.add(ticket)
        self._announce()
        return ticket

    def ahead(self, ticket: Ticket) -> int | None:
        """How many requests run or wait before ``ticket`` (None: it waits no more)."""
        for place in (self._batch, self.queue):
            if ticket in place:
                before = len(self._batch) if place is self.queue else 0
                return len(self._running) + before + place.index(ticket)
        return None

    def _admitted(self) -> asyncio.Future[None]:
        """The future of every ticket admitted at once: done, shared (never set again: only a
        queued ticket's is)."""
        done = self._done
        if done is None:
            done = self._done = asyncio.get_running_loop().create_future()
            done.set_result(None)
        return done

    def release(self, ticket: Ticket, *, finished: bool = True) -> None:
        """The request or operation ended (any way): its capacity goes to the next.
        ``finished``: the engine is done with it (its answer was read to the end); False when
        it may still be running it (its client left mid-answer), so its slot is not counted
        idle until the engine's slots are read again."""
        if ticket in self._running and self._shape.pinning:
            self._view.ended(ticket.slot, finished=finished)
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
        if not changed:
            return
        # Capacity freed matters only to what waits. A one-model engine's turn ends once it
        # drained: with nothing waiting and no pass running that is all a pass would do.
        single = self._shape.single_model
        if self.queue or self._batch or (single and self._passes.running):
            self._passes.kick()
        elif single and not self._running and self._active is None:
            self._turn = None
        self._announce()

    # Decision passes: the rules decide, this does the I/O and applies.

    def _moment(self) -> Moment[Ticket]:
        """The state the rules read (the scheduler's own lists, not copies)."""
        return Moment(
            self._shape,
            self.queue,
            self._running,
            self._batch,
            self._turn,
            self.last_turn,
            self._residency.resident,
            self._active,
            self._affinity,
            self.slots.owners,
            self.slots.free,
        )

    def _passed_over(self) -> None:
        """Tell the tickets a pass left queued that they wait."""
        tell_waiting([*self.queue, *self._batch], self.engine)

    async def _pass(self) -> None:
        """Take the steps ``rules.next_step`` names, one at a time, until it says stop."""
        self.slots.free = None
        sample: SlotSample | None = None
        sampled = recalled = afresh = False
        started_here = 0
        while True:
            step = rules.next_step(self._moment())
            if isinstance(step, rules.Admit):
                if not sampled:
                    sample, recalled = await self._sample(afresh=afresh)
                    sampled, started_here = True, 0
                if await self._admit_next(sample, started_here, final=not recalled):
                    started_here += 1
                elif recalled and rules.claim(self._moment(), None) is not None:
                    # The view leaves no room: read the engine before anyone waits on it.
                    sampled, afresh = False, True
                else:
                    return
            elif isinstance(step, rules.Stop):
                return
            elif isinstance(step, rules.StartOperation):
                self._start_exclusive(step.ticket)
                return
            elif await self._turn_changed(step):
                # A new turn looks at the slots again (after a relaunch the view was dropped).
                sampled, started_here = False, 0

    async def _turn_changed(
        self, step: rules.LoadModel | rules.BeginTurn | rules.AbsorbHead | rules.EndTurn
    ) -> bool:
        """Apply a step of a one-model engine's turn; whether a new turn began."""
        if isinstance(step, rules.AbsorbHead):
            self._batch.append(self.queue.pop(0))
            return False
        if isinstance(step, rules.EndTurn):
            self._turn = None
            self._announce()
            return False
        if isinstance(step, rules.LoadModel) and not await self._switch(step.model):
            return False
        self._turn = self.last_turn = step.model
        self._batch = rules.turn_claims(self.queue, step.model)
        for ticket in self._batch:
            self.queue.remove(ticket)
        self._announce()
        return True

    async def _admit_next(
        self, sample: SlotSample | None, started_here: int, *, final: bool
    ) -> bool:
        """Start the request ``rules.claim`` picks; False when none may start now (then, when
        ``sample`` was read from the engine (``final``), it is polled if only a slot it
        reports busy can free one)."""
        moment = self._moment()
        room = None if sample is None else sample.idle - started_here
        ticket = rules.claim(moment, room)
        if ticket is None:
            if final and rules.waits_for_slots(moment, sample):
                # Nothing of ours runs and the engine has no idle slot: look again shortly.
                self._passes.poll(self._poll_s)
            return False
        (self._batch if self._shape.single_model else self.queue).remove(ticket)
        await self._start(ticket)
        return True

    async def _switch(self, model: str) -> bool:
        """Load ``model`` on the drained engine; on failure fail its queued requests."""
        self._residency.loading = model
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
            self._residency.loading = None
            self._announce()
        self._residency.loaded(model, instance)
        self._forget_slots()
        return True

    def _fail_model(self, model: str, reason: str) -> None:
        log.warning("%s could not load %s: %s", self.engine, model, reason)
        fail_queued(self.queue, model, reason)
        self._announce()

    async def _sample(self, *, afresh: bool) -> tuple[SlotSample | None, bool]:
        """The idle slots (``SlotKeeper.sample``) on an engine that names them."""
        if not self._shape.pinning:
            return None, False
        return await self._keeper.sample(self._held, afresh=afresh)

    def _held(self) -> list[int]:
        """The slots PAIR's running requests hold now."""
        return [t.slot for t in self._running if t.slot is not None]

    def _start_exclusive(self, ticket: Ticket) -> None:
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
            await self._keeper.give(ticket, slot, parking=self._shape.parking and self._affinity)
        if ticket.admitted.done():  # cancelled while its slot was being erased
            self._running.discard(ticket)
            return
        ticket.admitted.set_result(None)
        self._announce()

    def _forget_slots(self) -> None:
        self._keeper.forget()

    # Reporting.

    @property
    def resident(self) -> str | None:
        """The model the engine holds (a one-model engine), as far as the scheduler knows."""
        return self._residency.resident

    def _announce(self) -> None:
        try:  # on every admission and release: no context manager
            self._on_change()
        except Exception:
            log.exception("the scheduler's change callback failed")

    @property
    def active(self) -> bool:
        """Whether it has anything: queued, running, an operation, a turn or a load."""
        loading = self._residency.loading
        return bool(self.queue or self._batch or self._running or self._turn or loading)

    def state(self) -> SchedulerState:
        """A snapshot for ``engine:scheduler``."""
        pinning = self._shape.pinning
        owners = self.slots.counts(self._shape.slots, parked=len(self.parking)) if pinning else None
        return scheduler_state(
            self.engine,
            self._moment(),
            loading=self._residency.loading,
            idle=self._view.reported,
            slot_owners=owners,
        )
