"""The engine scheduler's rules as plain functions: a moment in, a decision out (no loop, no
engine). The scheduler's behaviour over time is in test_scheduler.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from msgspec.structs import replace

from backend.workers.proxy.scheduler import rules
from backend.workers.proxy.scheduler.rules import (
    ABSORB_HEAD,
    ADMIT,
    END_TURN,
    STOP,
    BeginTurn,
    EngineShape,
    HandOver,
    LoadModel,
    Moment,
    SlotSample,
    StartOperation,
)

ONE_MODEL = EngineShape(slots=2, single_model=True, resident=("a",), instance=1, pinning=True)
MANY_MODELS = EngineShape(slots=1, single_model=False, resident=("a", "b"), instance=1)


@dataclass(frozen=True)
class Job:
    """A request (or, with another ``kind``, an exclusive operation) as the rules read it."""

    model: str
    session: str | None = None
    kind: str = "completion"

    @property
    def exclusive(self) -> bool:
        return self.kind != "completion"


class Running:
    """What runs, counted per model."""

    def __init__(self, *jobs: Job) -> None:
        self.jobs = jobs

    def count(self, model: str) -> int:
        return sum(1 for job in self.jobs if job.model == model)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)


def moment(
    shape: EngineShape,
    *queue: Job,
    running: tuple[Job, ...] = (),
    **state: Any,
) -> Moment[Job]:
    return replace(Moment(shape, queue, Running(*running)), **state)


OPERATION = Job("a", kind="delete")


# Turns on a one-model engine.


def test_a_drained_engine_begins_the_residents_turn_or_loads_another_model() -> None:
    assert rules.next_step(moment(ONE_MODEL, Job("a"), resident="a")) == BeginTurn("a")
    assert rules.next_step(moment(ONE_MODEL, Job("b"), resident="a")) == LoadModel("b")
    assert rules.next_step(moment(ONE_MODEL, resident="a")) == STOP, "nothing waits"
    busy = moment(ONE_MODEL, Job("b"), running=(Job("a"),), resident="a")
    assert rules.next_step(busy) == STOP, "a turn begins only on a drained engine"


def test_the_next_turn_alternates_models_and_stops_at_an_operation() -> None:
    queue = (Job("a"), Job("b"), OPERATION, Job("c"))
    assert rules.pick_turn(queue, "a") == Job("b"), "another model than the last goes next"
    assert rules.pick_turn(queue, None) == Job("a")
    assert rules.pick_turn((Job("a"), OPERATION, Job("c")), "a") == Job("a"), "c is behind it"
    assert rules.pick_turn((OPERATION, Job("a")), "a") == OPERATION
    assert rules.turn_claims((Job("a"), Job("b"), Job("a"), OPERATION, Job("a")), "a") == [
        Job("a"),
        Job("a"),
    ]


def test_an_operation_at_the_head_of_a_drained_one_model_engine_starts() -> None:
    step = rules.next_step(moment(ONE_MODEL, OPERATION, Job("a"), resident="a"))
    assert step == StartOperation(OPERATION)
    running = moment(ONE_MODEL, Job("a"), active=OPERATION, running=(OPERATION,))
    assert rules.next_step(running) == STOP, "nothing starts beside a running operation"


def test_an_open_turn_admits_its_batch_absorbs_its_head_and_ends_when_drained() -> None:
    batch = (Job("a"),)
    assert rules.next_step(moment(ONE_MODEL, Job("b"), batch=batch, turn="a")) == ADMIT
    assert rules.next_step(moment(ONE_MODEL, Job("a"), turn="a")) == ABSORB_HEAD
    running = (Job("a"),)
    assert rules.next_step(moment(ONE_MODEL, Job("b"), Job("a"), turn="a")) == END_TURN
    assert rules.next_step(moment(ONE_MODEL, Job("b"), turn="a", running=running)) == STOP
    assert not rules.joins_turn((OPERATION,), "a"), "an operation never joins a turn"


# An engine that holds many models.


def test_many_models_admit_side_by_side_and_an_operation_waits_for_the_drain() -> None:
    assert rules.next_step(moment(MANY_MODELS, Job("a"))) == ADMIT
    assert rules.next_step(moment(MANY_MODELS, OPERATION, running=(Job("b"),))) == STOP
    assert rules.next_step(moment(MANY_MODELS, OPERATION)) == StartOperation(OPERATION)
    assert rules.next_step(moment(MANY_MODELS)) == STOP


# Capacity.


@pytest.mark.parametrize(
    ("shape", "model", "expected"),
    [
        (EngineShape(slots=4), "a", 4),
        (EngineShape(slots=4, model_slots={"a": 2}), "a", 2),
        (EngineShape(slots=4, model_slots={"a": 2}), "b", 4),
        (EngineShape(slots=0), "a", 1),
        (EngineShape(slots=4, slots_known=False), "a", 64),
        (EngineShape(slots=4), None, 4),
    ],
)
def test_the_ceiling_is_the_models_count_else_the_engines(
    shape: EngineShape, model: str | None, expected: int
) -> None:
    assert rules.ceiling(shape, model) == expected


def test_a_request_is_admitted_at_once_only_where_a_pass_could_do_nothing_else() -> None:
    shape = EngineShape(slots=2, single_model=False)
    one = Running(Job("a"))
    assert rules.admits_at_once(shape, "a", one, queued=False, busy=False)
    assert not rules.admits_at_once(
        shape, "a", Running(Job("a"), Job("a")), queued=False, busy=False
    )
    assert not rules.admits_at_once(shape, "a", one, queued=True, busy=False)
    assert not rules.admits_at_once(shape, "a", one, queued=False, busy=True)
    assert not rules.admits_at_once(ONE_MODEL, "a", Running(), queued=False, busy=False)


def test_a_one_model_engine_starts_at_once_only_what_a_pass_would_start_first() -> None:
    assert rules.starts_at_once(moment(ONE_MODEL, resident="a"), "a"), "drained, resident"
    assert not rules.starts_at_once(moment(ONE_MODEL, resident="a"), "b"), "b needs a load"
    open_turn = moment(ONE_MODEL, resident="a", turn="a", running=(Job("a"),))
    assert rules.starts_at_once(open_turn, "a"), "its turn is open and has room"
    assert not rules.starts_at_once(replace(open_turn, turn="b"), "a")
    full = moment(ONE_MODEL, resident="a", turn="a", running=(Job("a"), Job("a")))
    assert not rules.starts_at_once(full, "a"), "two slots, two running"
    assert not rules.starts_at_once(moment(ONE_MODEL, Job("b"), resident="a"), "a"), "b waits"
    batch = moment(ONE_MODEL, resident="a", turn="a", batch=(Job("a"),))
    assert not rules.starts_at_once(batch, "a"), "the turn's own claims go first"
    operation = moment(ONE_MODEL, resident="a", active=OPERATION, running=(OPERATION,))
    assert not rules.starts_at_once(operation, "a")
    assert rules.starts_at_once(moment(MANY_MODELS, running=(Job("a"),)), "b")
    assert not rules.starts_at_once(moment(MANY_MODELS, running=(Job("a"),)), "a")


def test_a_claim_needs_an_idle_slot_and_room_under_the_ceiling() -> None:
    batch = (Job("a"), Job("a"))
    turn = moment(ONE_MODEL, batch=batch, turn="a")
    assert rules.claim(turn, None) == Job("a")
    assert rules.claim(turn, 0) is None, "the engine reports no idle slot left"
    full = moment(ONE_MODEL, batch=batch, turn="a", running=(Job("a"), Job("a")))
    assert rules.claim(full, 3) is None, "two slots, two running"
    shape = EngineShape(slots=1, single_model=False)
    many = moment(shape, Job("a"), Job("b"), OPERATION, Job("c"), running=(Job("a"),))
    assert rules.claim(many, None) == Job("b"), "a is full; c waits behind the operation"
    assert rules.claim(moment(shape, Job("a"), running=(Job("a"),)), None) is None


def test_affinity_prefers_the_kv_an_idle_slot_holds_then_a_warm_chat_then_arrival() -> None:
    batch = (Job("a", "x"), Job("a", "y"), Job("a", "z"))
    owners = {0: "z", 1: "q"}
    held = moment(ONE_MODEL, batch=batch, turn="a", owners=owners, free=[0])
    assert rules.claim(held, 1) == Job("a", "z")
    warm = moment(ONE_MODEL, batch=batch, turn="a", running=(Job("a", "y"),))
    assert rules.claim(warm, 1) == Job("a", "y")
    assert rules.claim(moment(ONE_MODEL, batch=batch, turn="a"), 1) == Job("a", "x")
    plain = moment(ONE_MODEL, batch=batch, turn="a", owners=owners, free=[0], affinity=False)
    assert rules.claim(plain, 1) == Job("a", "x")


def test_the_engine_is_polled_only_when_nothing_of_pairs_runs_and_its_slots_were_read() -> None:
    assert rules.waits_for_slots(moment(ONE_MODEL), SlotSample(0))
    assert not rules.waits_for_slots(moment(ONE_MODEL), None)
    assert not rules.waits_for_slots(moment(ONE_MODEL, running=(Job("a"),)), SlotSample(0))


# Slots.


def test_a_slot_is_the_sessions_own_else_fresh_else_keyless_else_the_longest_unused() -> None:
    owners: dict[int, str | None] = {0: "x", 1: None, 2: "y", 3: "w"}
    used = {0: 4, 1: 3, 2: 1, 3: 2}
    choose = rules.choose_slot
    assert choose([0, 1, 2, 3, 4], owners, used, "x", affinity=True) == 0
    assert choose([0, 1, 2, 3, 4], owners, used, "v", affinity=True) == 4, "fresh"
    assert choose([0, 1, 2, 3], owners, used, "v", affinity=True) == 1, "keyless"
    assert choose([0, 2, 3], owners, used, "v", affinity=True) == 2, "used longest ago"
    assert choose([0, 2, 3], owners, used, None, affinity=True) == 2
    assert choose([3, 0], owners, used, "x", affinity=False) == 3, "without affinity: first"
    assert choose([], owners, used, "x", affinity=True) is None


def test_a_hand_over_parks_and_erases_anothers_kv_and_restores_the_sessions_own() -> None:
    owners: dict[int, str | None] = {0: "x", 1: None}
    assert rules.hand_over(owners, 0, "x", parking=True) == HandOver(0, None, False, False)
    assert rules.hand_over(owners, 0, "y", parking=True) == HandOver(0, "x", True, True)
    assert rules.hand_over(owners, 0, "y", parking=False) == HandOver(0, None, True, False)
    assert rules.hand_over(owners, 1, "y", parking=True) == HandOver(1, None, True, True)
    assert rules.hand_over(owners, 1, None, parking=True) == HandOver(1, None, True, False)
    assert rules.hand_over(owners, 2, "y", parking=True) == HandOver(2, None, False, True)
    assert rules.hand_over(owners, 2, None, parking=True) == HandOver(2, None, False, False)


def test_only_a_new_instance_the_scheduler_did_not_start_is_a_relaunch() -> None:
    def relaunched(instance: int, *, loading: bool = False) -> bool:
        shape = EngineShape(instance=instance)
        return rules.relaunched_elsewhere(shape, 2, {1}, loading=loading)

    assert relaunched(3)
    assert not relaunched(2), "the current run"
    assert not relaunched(1), "a table older than the scheduler's own switch"
    assert not relaunched(0), "the table does not know"
    assert not relaunched(3, loading=True), "the scheduler's own switch is under way"
