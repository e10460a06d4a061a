"""The broker's view of the engine schedulers the proxy worker runs (docs/SCHEDULER.md).

The worker owns the schedulers (queues per model, a one-model engine's turns, exclusive
operations, slot owners) and pushes their state whenever it changes, at most 4 times a second.
``SchedulerView`` keeps the last state for ``engine:scheduler`` and the engine stream's snapshot,
and publishes each change as a numbered ``scheduler_changed`` event on that stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.engines import EngineEvent, EngineSchedulerChanged, NodeScope
from backend.protocol.types.scheduler import SchedulerStates

NO_SCHEDULERS = SchedulerStates(engines=[])


class SchedulerView:
    """The last scheduler state the proxy worker pushed; owns nothing but that value."""

    def __init__(self, events: NumberedStream[EngineEvent]) -> None:
        self._events = events
        self._states = NO_SCHEDULERS

    def states(self) -> SchedulerStates:
        """The schedulers as the worker last told them (none before it did)."""
        return self._states

    def changed(self, states: SchedulerStates) -> None:
        """The worker pushed ``states``: keep it and publish it, unless nothing changed."""
        if states == self._states:
            return
        self._states = states
        self._events.publish(partial(_scheduler_changed, states))


def register(
    dispatcher: Dispatcher,
    view: SchedulerView,
    fetch: Callable[[], Awaitable[SchedulerStates | None]] | None = None,
) -> None:
    """Route ``engine:scheduler`` (a call with another member's ``node`` is forwarded first).

    ``fetch`` asks the worker for its state now (pushes lag by up to a quarter second); when it
    cannot answer, the last pushed state is the answer.
    """

    async def scheduler(_: NodeScope, __: RpcPeer) -> SchedulerStates:
        fresh = await fetch() if fetch is not None else None
        if fresh is not None:
            view.changed(fresh)
            return fresh
        return view.states()

    dispatcher.add(methods.ENGINE_SCHEDULER, scheduler)


def _scheduler_changed(states: SchedulerStates, seq: int) -> EngineEvent:
    return EngineSchedulerChanged(seq=seq, scheduler=states)
