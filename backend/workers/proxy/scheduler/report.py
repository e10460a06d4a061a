"""An engine scheduler's state as ``engine:scheduler`` shows it (a pure function of a moment)."""

from __future__ import annotations

from itertools import chain

from backend.protocol.types.base import EngineName
from backend.protocol.types.scheduler import (
    ExclusiveOperation,
    ModelQueue,
    SchedulerState,
    SlotOwners,
)
from backend.workers.proxy.scheduler.rules import Moment, T, ceiling


def scheduler_state(
    engine: str,
    moment: Moment[T],
    *,
    loading: str | None,
    idle: int | None,
    slot_owners: SlotOwners | None,
) -> SchedulerState:
    """Per model what runs and waits, the turn, the operation running (or the model switch
    ``loading``) and how many wait, and the slots (``idle`` as last
    sampled; ``slot_owners`` as counts, None when the engine's slots are not pinned)."""
    waiting = list(chain(moment.batch, moment.queue))
    queues: dict[str, list[int]] = {}
    for ticket in waiting:
        if not ticket.exclusive:
            queues.setdefault(ticket.model, [0, 0])[1] += 1
    for ticket in moment.running:
        if not ticket.exclusive:
            queues.setdefault(ticket.model, [0, 0])[0] += 1
    exclusive: ExclusiveOperation | None = None
    if moment.active is not None:
        exclusive = ExclusiveOperation(kind=moment.active.kind, model=moment.active.model or None)
    elif loading is not None:
        exclusive = ExclusiveOperation(kind="switch", model=loading)
    return SchedulerState(
        engine=EngineName(engine),
        single_model=moment.shape.single_model,
        ceiling=ceiling(moment.shape, moment.turn or moment.resident),
        idle=idle,
        running=sum(1 for ticket in moment.running if not ticket.exclusive),
        waiting=sum(1 for ticket in waiting if not ticket.exclusive),
        queues=[ModelQueue(model=m, running=c[0], waiting=c[1]) for m, c in sorted(queues.items())],
        resident=moment.resident,
        turn=moment.turn,
        exclusive=exclusive,
        exclusive_waiting=sum(1 for ticket in moment.queue if ticket.exclusive),
        slot_owners=slot_owners,
    )
