"""How ``pair engines --verbose`` shows an engine's scheduler (docs/SCHEDULER.md): a few
labelled lines under the engine's row, each left out when it has nothing to say."""

from __future__ import annotations

from backend.protocol.types.scheduler import SchedulerState, SlotOwners

INDENT = "  "
LABEL_WIDTH = 11
NO_WORK_YET = "no requests yet"


def scheduler_lines(state: SchedulerState | None) -> list[str]:
    """The lines under an engine's row: its scheduler's slots and load, each model's queue,
    the one-model engine's turn, the exclusive operation and the slot owners."""
    if state is None:
        return [_line("scheduler", NO_WORK_YET)]
    rows = [
        ("scheduler", _load(state)),
        ("queues", " · ".join(_queue(q.model, q.running, q.waiting) for q in state.queues)),
        ("turn", _turn(state)),
        ("exclusive", _exclusive(state)),
        ("owners", _owners(state.slot_owners)),
    ]
    return [_line(label, text) for label, text in rows if text]


def _line(label: str, text: str) -> str:
    return f"{INDENT}{label:<{LABEL_WIDTH}}{text}"


def _load(state: SchedulerState) -> str:
    idle = f", {state.idle} idle" if state.idle is not None else ""
    return f"{state.running} running, {state.waiting} waiting · slots {state.ceiling}{idle}"


def _queue(model: str, running: int, waiting: int) -> str:
    counts = [f"{running} running"] if running else []
    counts += [f"{waiting} waiting"] if waiting else []
    return f"{model} {', '.join(counts) or 'idle'}"


def _turn(state: SchedulerState) -> str:
    if not (state.single_model or state.turn or state.resident):
        return ""
    if state.resident is None:
        loaded = "nothing loaded"
    elif state.resident == state.turn:
        loaded = "loaded"
    else:
        loaded = f"{state.resident} loaded"
    return f"{state.turn or 'none'} ({loaded})"


def _exclusive(state: SchedulerState) -> str:
    more = state.exclusive_waiting
    operation = state.exclusive
    if operation is None:
        return f"{more} waiting" if more else ""
    text = f"{operation.kind} {operation.model}" if operation.model else operation.kind
    if state.running:
        text += f", after the {state.running} running"
    return f"{text} · {more} more waiting" if more else text


def _owners(owners: SlotOwners | None) -> str:
    if owners is None:
        return ""
    sessions = f"{owners.sessions} session{'s' if owners.sessions != 1 else ''}"
    parked = f", {owners.parked} parked" if owners.parked else ""
    return f"{sessions}, {owners.keyless} keyless, {owners.fresh} fresh{parked}"
