"""Engine schedulers as ``engine:scheduler`` shows them (docs/SCHEDULER.md)."""

from __future__ import annotations

import msgspec

from backend.protocol.types.base import EngineName, Wire


class ModelQueue(Wire, frozen=True, kw_only=True):
    """One model's requests at an engine's scheduler: admitted (running) and queued."""

    model: str
    running: int = 0
    waiting: int = 0


class ExclusiveOperation(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """An operation that runs alone on a drained engine (load, unload, delete, switch, update,
    restart); ``model`` when it is about one."""

    kind: str
    model: str | None = None


class SlotOwners(Wire, frozen=True, kw_only=True):
    """Who the engine's slots were last handed to, as counts: a session PAIR can recognise,
    a keyless request (an owner nobody can prove to be), or nobody since the engine started;
    and how many conversations have their KV parked in a file until they come back."""

    sessions: int = 0
    keyless: int = 0
    fresh: int = 0
    parked: int = 0


class SchedulerState(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One local engine's scheduler (docs/SCHEDULER.md).

    ``ceiling`` is the engine's slot count, ``idle`` what the engine last reported idle (absent
    where it reports no slots). ``turn`` is the model that owns a one-model engine now;
    ``exclusive`` the operation running alone, ``exclusive_waiting`` those queued behind.
    """

    engine: EngineName
    single_model: bool = False
    ceiling: int = 1
    idle: int | None = None
    running: int = 0
    waiting: int = 0
    queues: list[ModelQueue] = msgspec.field(default_factory=list)
    resident: str | None = None
    turn: str | None = None
    exclusive: ExclusiveOperation | None = None
    exclusive_waiting: int = 0
    slot_owners: SlotOwners | None = None


class SchedulerStates(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:scheduler``: every local engine's scheduler that has seen work or
    runs (an engine with none is absent)."""

    engines: list[SchedulerState]
