"""How an engine card says what its scheduler is doing (docs/SCHEDULER.md): one compact line
while it has work, an exclusive operation or a one-model engine's turn, and a tooltip with the
rest (slots, each model's queue, what is loaded), for instance:

    2 running · 3 waiting (qwen 2, tiny 1) · turn: qwen · deleting tiny after them
"""

from __future__ import annotations

from backend.protocol.types.scheduler import SchedulerState, SlotOwners

# What an exclusive operation's kind reads as while it runs (or waits for the engine to drain).
EXCLUSIVE_VERBS: dict[str, str] = {
    "load": "loading",
    "unload": "unloading",
    "delete": "deleting",
    "switch": "switching to",
    "update": "updating",
    "restart": "restarting",
}


def has_news(state: SchedulerState | None) -> bool:
    """Whether the scheduler has anything to show: work, an exclusive operation or a turn."""
    if state is None:
        return False
    work = state.running or state.waiting or state.exclusive_waiting
    return bool(work) or state.exclusive is not None or state.turn is not None


def scheduler_line(state: SchedulerState | None) -> str:
    """The card's line; empty while the scheduler has no news."""
    if state is None or not has_news(state):
        return ""
    parts = [f"{state.running} running"] if state.running else []
    if state.waiting:
        parts.append(f"{state.waiting} waiting{_waiting_by_model(state)}")
    if state.turn is not None:
        parts.append(f"turn: {state.turn}{_loaded_instead(state)}")
    exclusive = _exclusive(state)
    if exclusive:
        parts.append(exclusive)
    owners = _owners(state.slot_owners)
    if owners:
        parts.append(f"slots: {owners}")
    return " · ".join(parts)


def scheduler_tip(state: SchedulerState | None) -> str:
    """The line's tooltip: slots and idle, each model's queue, the turn and what is loaded."""
    if state is None or not has_news(state):
        return ""
    idle = f", {state.idle} idle" if state.idle is not None else ""
    lines = [f"{state.ceiling} slot{'s' if state.ceiling != 1 else ''}{idle}"]
    lines += [f"{q.model}: {q.running} running, {q.waiting} waiting" for q in state.queues]
    if state.single_model:
        lines.append(f"One model at a time; loaded: {state.resident or 'none'}")
    if state.slot_owners is not None:
        owners = state.slot_owners
        lines.append(
            f"Slots last given to: {owners.sessions} sessions, {owners.keyless} keyless "
            f"requests; {owners.fresh} not used since the engine started"
        )
        if owners.parked:
            lines.append(f"{owners.parked} conversations parked until they come back")
    return "\n".join(lines)


def _waiting_by_model(state: SchedulerState) -> str:
    waiting = [f"{queue.model} {queue.waiting}" for queue in state.queues if queue.waiting]
    return f" ({', '.join(waiting)})" if waiting else ""


def _loaded_instead(state: SchedulerState) -> str:
    if state.resident is None or state.resident == state.turn:
        return ""
    return f" ({state.resident} loaded)"


def _exclusive(state: SchedulerState) -> str:
    operation, more = state.exclusive, state.exclusive_waiting
    if operation is None:
        return f"{more} operation{'s' if more != 1 else ''} waiting" if more else ""
    verb = EXCLUSIVE_VERBS.get(operation.kind, operation.kind)
    text = f"{verb} {operation.model}" if operation.model else verb
    if state.running:
        text += " after them"  # it runs alone, once the running requests are done
    return f"{text} (+{more} more)" if more else text


def _owners(owners: SlotOwners | None) -> str:
    if owners is None:
        return ""
    counts = (
        (owners.sessions, "session", "sessions"),
        (owners.keyless, "keyless", "keyless"),
        (owners.fresh, "fresh", "fresh"),
        (owners.parked, "parked", "parked"),
    )
    return ", ".join(f"{n} {one if n == 1 else many}" for n, one, many in counts if n)
