"""The engine scheduler's rules as pure functions over one moment of its state.

A decision pass of ``EngineScheduler`` reads its state into a ``Moment`` and asks ``next_step``
what comes next (stop, run an exclusive operation, load a model, begin, widen or end a turn,
admit); it does the I/O the step names and applies it, then asks again. To admit, ``claim``
picks the request with room (by affinity), ``choose_slot`` its slot and ``hand_over`` what the
slot needs first (park, erase, restore). Nothing here awaits, keeps state or changes what it is
given: the sequences of a moment are the scheduler's own, read in place, so a decision costs no
copy of the queue. The rules are described in docs/SCHEDULER.md.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from itertools import takewhile
from typing import Generic, Protocol, TypeVar

import msgspec

# The ceiling of an engine whose slot count is not known (a known count is the ceiling).
MAX_CONCURRENCY = 64


class SlotSample(msgspec.Struct, frozen=True):
    """The engine's idle slots at one moment: how many, and their ids when it names them."""

    idle: int
    ids: tuple[int, ...] | None = None


class EngineShape(msgspec.Struct, frozen=True):
    """What the routing table says about the engine (``RouteTarget`` of the local node)."""

    slots: int = 1
    model_slots: Mapping[str, int] = msgspec.field(default_factory=dict)
    single_model: bool = False
    resident: tuple[str, ...] = ()
    instance: int = 0
    pinning: bool = False
    slots_known: bool = True
    parking: bool = False


class Waiting(Protocol):
    """A request or exclusive operation as the rules see it (the scheduler's ``Ticket``)."""

    @property
    def model(self) -> str:
        """The model it is for."""
        ...

    @property
    def kind(self) -> str:
        """``completion``, or the exclusive operation's kind (``load``, ``delete``, ...)."""
        ...

    @property
    def session(self) -> str | None:
        """Its conversation, None when keyless."""
        ...

    @property
    def exclusive(self) -> bool:
        """Whether it must run alone on a drained engine."""
        ...


T = TypeVar("T", bound=Waiting)
T_co = TypeVar("T_co", bound=Waiting, covariant=True)


class RunningView(Protocol[T_co]):
    """The admitted requests and operations, with a count per model."""

    def count(self, model: str) -> int:
        """How many of ``model``'s run."""
        ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[T_co]: ...


class Moment(msgspec.Struct, Generic[T], frozen=True):
    """The scheduler's state at one decision; read, never changed, by the rules.

    ``batch`` holds the requests the current turn claimed, ``active`` the exclusive operation
    that runs, ``owners`` who last ran on each slot and ``free`` the idle slot ids this pass may
    still hand out (None: the engine did not name them)."""

    shape: EngineShape
    queue: Sequence[T]
    running: RunningView[T]
    batch: Sequence[T] = ()
    turn: str | None = None
    last_turn: str | None = None
    resident: str | None = None
    active: T | None = None
    affinity: bool = True
    owners: Mapping[int, str | None] = msgspec.field(default_factory=dict)
    free: Sequence[int] | None = None


# What comes next in a decision pass.


class Stop(msgspec.Struct, frozen=True):
    """Nothing more can start now: the pass ends."""


class Admit(msgspec.Struct, frozen=True):
    """Start a request: sample the engine's slots (once per turn), then ``claim`` one."""


class StartOperation(msgspec.Struct, Generic[T], frozen=True):
    """Run this exclusive operation alone on the drained engine; the pass ends."""

    ticket: T


class LoadModel(msgspec.Struct, frozen=True):
    """Relaunch the drained engine with ``model``, then begin its turn."""

    model: str


class BeginTurn(msgspec.Struct, frozen=True):
    """``model`` is resident and the engine drained: its turn claims its queued requests."""

    model: str


class AbsorbHead(msgspec.Struct, frozen=True):
    """The head of the queue is the turn's model: it joins the turn."""


class EndTurn(msgspec.Struct, frozen=True):
    """The turn has nothing left and the engine drained: the next turn may begin."""


Step = Stop | Admit | StartOperation[T] | LoadModel | BeginTurn | AbsorbHead | EndTurn
STOP, ADMIT, ABSORB_HEAD, END_TURN = Stop(), Admit(), AbsorbHead(), EndTurn()


def next_step(moment: Moment[T]) -> Step[T]:
    """What the pass does next: nothing while an operation runs; on a one-model engine the
    turn decides; on an engine that holds many models an operation at the head waits for it to
    drain and anything else may be admitted."""
    if moment.active is not None:
        return STOP
    if moment.shape.single_model:
        return _turn_step(moment)
    head = moment.queue[0] if moment.queue else None
    if head is None:
        return STOP
    if head.exclusive:
        return STOP if len(moment.running) else StartOperation(head)
    return ADMIT


def _turn_step(moment: Moment[T]) -> Step[T]:
    """A turn begins on a drained engine (loading its model), stays open while its requests
    or the queue's head of its model remain, and ends otherwise."""
    if moment.turn is None:
        if len(moment.running) or not moment.queue:
            return STOP
        pick = pick_turn(moment.queue, moment.last_turn)
        if pick.exclusive:
            return StartOperation(pick)
        if moment.resident != pick.model:
            return LoadModel(pick.model)
        return BeginTurn(pick.model)
    if moment.batch:
        return ADMIT
    if joins_turn(moment.queue, moment.turn):
        return ABSORB_HEAD
    return STOP if len(moment.running) else END_TURN


def ahead_of_operation(queue: Iterable[T]) -> Iterator[T]:
    """The queued requests ahead of the first exclusive operation (which waits for them)."""
    return takewhile(lambda ticket: not ticket.exclusive, queue)


def pick_turn(queue: Sequence[T], last_turn: str | None) -> T:
    """Whose turn is next: from the requests ahead of the first exclusive operation, another
    model than the one that just ran if one waits (so two models alternate), else the head;
    an exclusive operation at the head goes next. ``queue`` must not be empty."""
    first: T | None = None
    for ticket in ahead_of_operation(queue):
        if ticket.model != last_turn:
            return ticket
        if first is None:
            first = ticket
    return first if first is not None else queue[0]


def turn_claims(queue: Iterable[T], model: str) -> list[T]:
    """The queued requests a new turn of ``model`` takes: its own, up to the first operation."""
    return [ticket for ticket in ahead_of_operation(queue) if ticket.model == model]


def joins_turn(queue: Sequence[T], turn: str) -> bool:
    """Whether the head of the queue joins the open turn: a request of its model (a later
    arrival behind another model's request waits for that one)."""
    head = queue[0] if queue else None
    return head is not None and not head.exclusive and head.model == turn


# Capacity.


def ceiling(shape: EngineShape, model: str | None) -> int:
    """How many of ``model``'s may run at once: its own slot count, else the engine's; 64 on
    an engine whose count is not known."""
    if not shape.slots_known:
        return MAX_CONCURRENCY
    slots = shape.model_slots.get(model, shape.slots) if model else 0
    return max(1, slots or shape.slots)


def admits_at_once(
    shape: EngineShape, model: str, running: RunningView[T], *, queued: bool, busy: bool
) -> bool:
    """Whether a completion could only be admitted by a pass, so needs none: on an engine that
    holds many models and pins no slots, with nothing ``queued`` ahead of it, the engine not
    ``busy`` with an operation or a turn's batch, and room for its model."""
    if shape.single_model or shape.pinning or queued or busy:
        return False
    return running.count(model) < ceiling(shape, model)


def starts_at_once(moment: Moment[T], model: str) -> bool:
    """Whether a completion of ``model`` arriving now is one a pass would start first with no
    choice to make: nothing queued or claimed ahead of it, no operation, room under its
    ceiling, and on a one-model engine its model's turn open or the engine drained with its
    model resident (the pass would begin that turn). Its slot is the scheduler's part."""
    if moment.queue or moment.batch or moment.active is not None:
        return False
    shape, running = moment.shape, moment.running
    if not shape.single_model:
        return running.count(model) < ceiling(shape, model)
    if moment.turn is None:
        return not len(running) and moment.resident == model
    return moment.turn == model and len(running) < ceiling(shape, model)


def claim(moment: Moment[T], room: int | None) -> T | None:
    """The next request to start, by affinity, among those with room (None: none may start).

    ``room`` is how many idle slots the engine reported that this pass has not filled yet
    (None when the engine's slots are not read: the ceiling alone decides). A one-model
    engine starts its turn's batch up to the turn model's ceiling; one that holds many models
    starts any request ahead of the first operation whose model is under its own ceiling."""
    if room is not None and room < 1:
        return None
    shape, running = moment.shape, moment.running
    pool: Sequence[T]
    if shape.single_model:
        if len(running) >= ceiling(shape, moment.turn):
            return None
        pool = moment.batch
    else:
        pool = [
            ticket
            for ticket in ahead_of_operation(moment.queue)
            if running.count(ticket.model) < ceiling(shape, ticket.model)
        ]
    return by_affinity(moment, pool) if pool else None


def by_affinity(moment: Moment[T], pool: Sequence[T]) -> T:
    """The session whose KV an idle slot holds goes first; then one already running (its
    chat is warm); then arrival order. Without affinity: arrival order."""
    if not moment.affinity:
        return pool[0]
    held = holders(moment.owners, moment.free)
    for ticket in pool:
        if ticket.session is not None and ticket.session in held:
            return ticket
    warm = {ticket.session for ticket in moment.running if ticket.session is not None}
    return next((ticket for ticket in pool if ticket.session in warm), pool[0])


def waits_for_slots(moment: Moment[T], sample: SlotSample | None) -> bool:
    """Whether nothing can start until the engine frees a slot it reported busy: nothing of
    PAIR's runs (a release would start the next) and the engine's slots were read."""
    return not len(moment.running) and sample is not None


# Slots.


def holders(owners: Mapping[int, str | None], free: Iterable[int] | None) -> set[str | None]:
    """The sessions whose KV an idle slot of this pass holds."""
    return {owners[slot] for slot in free or () if slot in owners}


def choose_slot(
    free: Sequence[int],
    owners: Mapping[int, str | None],
    used: Mapping[int, int],
    session: str | None,
    *,
    affinity: bool,
) -> int | None:
    """The idle slot ``session`` gets: its own, else a fresh one, else one a keyless request
    left, else the one another session used longest ago (``used``: when each was last handed
    out). Without affinity: the first idle one. None when there is none."""
    if not free:
        return None
    if not affinity:
        return free[0]

    def rank(slot: int) -> tuple[int, int]:
        if slot in owners and session is not None and owners[slot] == session:
            return 0, 0
        if slot not in owners:
            return 1, 0
        return 2 if owners[slot] is None else 3, used.get(slot, 0)

    return min(free, key=rank)


def needs_erase(owners: Mapping[int, str | None], slot: int, session: str | None) -> bool:
    """Whether giving ``slot`` to ``session`` needs an erase first: it holds someone's KV (a
    keyless owner counts as anyone) and that someone is not ``session``."""
    if slot not in owners:
        return False
    previous = owners[slot]
    return previous is None or previous != session


class HandOver(msgspec.Struct, frozen=True):
    """What giving ``slot`` to a session takes, in order: park the KV of ``park`` (the session
    leaving it), erase it, then restore the session's own parked KV if it has one."""

    slot: int
    park: str | None
    erase: bool
    restore: bool


def hand_over(
    owners: Mapping[int, str | None],
    slot: int,
    session: str | None,
    *,
    parking: bool,
) -> HandOver:
    """The steps that give ``slot`` to ``session``: a fresh slot or the session's own needs
    none; another's is erased (its owner's KV parked first when ``parking``: a keyless owner
    is nobody's to keep); a slot that is not the session's own gets its parked KV back."""
    previous = owners.get(slot)
    own = slot in owners and previous == session
    erase = needs_erase(owners, slot, session)
    park = previous if erase and parking else None
    return HandOver(slot, park, erase, restore=not own and parking and session is not None)


def relaunched_elsewhere(
    shape: EngineShape, instance: int, retired: Collection[int], *, loading: bool
) -> bool:
    """Whether the table shows a run of the engine the scheduler did not cause (a restart, a
    crash, a switch asked through the broker): a new instance, neither the current one nor one
    the scheduler's own switch retired (a table older than that switch), while it loads none."""
    return (
        shape.instance != 0
        and shape.instance != instance
        and shape.instance not in retired
        and not loading
    )
