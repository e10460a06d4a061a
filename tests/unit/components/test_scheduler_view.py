"""``SchedulerView``: the schedulers the proxy worker pushes, published in order on the engine
stream (numbered with the stream's other events, a repeat left out), kept for the engine
snapshot and answered by ``engine:scheduler``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import msgspec

from backend.components.engines.component import EnginesComponent
from backend.components.engines.scheduler_view import NO_SCHEDULERS, SchedulerView, register
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import (
    EngineEvent,
    EngineModels,
    EngineModelsChanged,
    EngineSchedulerChanged,
)
from backend.protocol.types.scheduler import (
    ExclusiveOperation,
    ModelQueue,
    SchedulerState,
    SchedulerStates,
    SlotOwners,
)

LLAMACPP = EngineName("llamacpp")
NO_MODELS = EngineModels(models=[], by_engine={}, loaded_by_engine={}, slots_by_engine={})


class Subscriber:
    """A client on the engine stream: what it was pushed, decoded as a client would."""

    def __init__(self) -> None:
        self.events: list[EngineEvent] = []

    def notify(self, method: str, params: Any) -> None:
        assert method == methods.ENGINE_EVENT.name
        self.events.append(methods.ENGINE_EVENT.decode(msgspec.to_builtins(params)))

    @property
    def peer(self) -> RpcPeer:
        return cast(RpcPeer, self)


def busy(running: int, waiting: int) -> SchedulerStates:
    """llama-server's scheduler with ``running`` requests of qwen and ``waiting`` behind."""
    state = SchedulerState(
        engine=LLAMACPP,
        single_model=True,
        ceiling=2,
        idle=2 - running,
        running=running,
        waiting=waiting,
        queues=[ModelQueue(model="qwen", running=running, waiting=waiting)],
        resident="qwen",
        turn="qwen",
        exclusive=ExclusiveOperation(kind="delete", model="tiny") if waiting else None,
        slot_owners=SlotOwners(sessions=running, fresh=2 - running),
    )
    return SchedulerStates(engines=[state])


def stream() -> tuple[NumberedStream[EngineEvent], Subscriber]:
    events = NumberedStream(methods.ENGINE_EVENT, ClientHub())
    subscriber = Subscriber()
    events.subscribe(subscriber.peer)
    return events, subscriber


def test_each_new_state_is_published_in_order_numbered_with_the_streams_other_events() -> None:
    events, subscriber = stream()
    view = SchedulerView(events)
    first, second = busy(2, 3), busy(1, 0)
    view.changed(first)
    events.publish(lambda seq: EngineModelsChanged(seq=seq, models=NO_MODELS))
    view.changed(second)
    assert subscriber.events == [
        EngineSchedulerChanged(seq=1, scheduler=first),
        EngineModelsChanged(seq=2, models=NO_MODELS),
        EngineSchedulerChanged(seq=3, scheduler=second),
    ]
    assert view.states() == second


def test_a_state_equal_to_the_last_is_not_published_again() -> None:
    events, subscriber = stream()
    view = SchedulerView(events)
    view.changed(NO_SCHEDULERS)  # nothing ran yet: no news
    view.changed(busy(2, 3))
    view.changed(busy(2, 3))
    assert [event.seq for event in subscriber.events] == [1]
    assert events.seq == 1


def test_the_empty_state_the_proxy_reports_once_its_worker_exited_is_published() -> None:
    events, subscriber = stream()
    view = SchedulerView(events)
    view.changed(busy(2, 3))
    view.changed(NO_SCHEDULERS)
    assert subscriber.events[-1] == EngineSchedulerChanged(seq=2, scheduler=NO_SCHEDULERS)
    assert view.states() == NO_SCHEDULERS


def test_the_engine_snapshot_carries_the_last_state() -> None:
    events, _ = stream()
    view = SchedulerView(events)
    engines = EnginesComponent(
        data_dir=Path("/nonexistent"),
        ledger=cast(Any, None),
        errors_sink=cast(Any, None),
        clock=cast(Any, None),
        events=events,
        scheduler=view.states,
    )
    assert engines.snapshot(0).scheduler == NO_SCHEDULERS
    view.changed(busy(2, 3))
    snapshot = engines.snapshot(events.seq)
    assert (snapshot.seq, snapshot.scheduler) == (1, busy(2, 3))


def test_an_engines_component_without_a_view_says_nothing_of_schedulers() -> None:
    engines = EnginesComponent(
        data_dir=Path("/nonexistent"),
        ledger=cast(Any, None),
        errors_sink=cast(Any, None),
        clock=cast(Any, None),
        events=NumberedStream(methods.ENGINE_EVENT, ClientHub()),
    )
    assert engines.snapshot(0).scheduler is None


async def test_engine_scheduler_answers_the_last_state() -> None:
    events, subscriber = stream()
    view = SchedulerView(events)
    dispatcher = Dispatcher()
    register(dispatcher, view)
    assert await dispatcher(methods.ENGINE_SCHEDULER.name, None, subscriber.peer) == NO_SCHEDULERS
    view.changed(busy(2, 3))
    answer = await dispatcher(methods.ENGINE_SCHEDULER.name, {}, subscriber.peer)
    assert methods.ENGINE_SCHEDULER.decode_result(msgspec.to_builtins(answer)) == busy(2, 3)
