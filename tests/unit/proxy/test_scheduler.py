"""The engine scheduler as state: a fake clock and a fake engine (no sockets, no processes).

Every rule of docs/SCHEDULER.md, including the seed's races: two requests admitted in one pass
never share a slot id; a handoff erase reaches the engine before the request; settling never
erases.
"""

from __future__ import annotations

import asyncio

import pytest

from backend.workers.proxy.scheduler.engine_scheduler import EngineShape, LoadFailed
from tests.unit.proxy.scheduler_fakes import Requests, Schedulers, pinned, settle

pytest_plugins = ["tests.unit.proxy.scheduler_support"]


async def submit_burst(requests: Requests, count: int, *, rounds: int = 20) -> None:
    """Submit ``count`` keyless requests ``r0``, ``r1``… at once, then let ``rounds`` of the
    scheduler's passes run (``settle``)."""
    for index in range(count):
        requests.submit(f"r{index}")
    await settle(rounds)


# Capacity.


async def test_at_most_the_ceiling_runs_and_the_next_starts_when_one_settles(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2), engine_slots=4)
    scheduler = requests.scheduler
    for name in ("r1", "r2", "r3"):
        requests.submit(name)
    await settle()
    assert requests.admitted == ["r1", "r2"]
    assert scheduler.state().waiting == 1
    requests.finish("r1")
    await settle()
    assert requests.admitted == ["r1", "r2", "r3"]


@pytest.mark.parametrize(("slots", "known", "ceiling"), [(100, True, 100), (100, False, 64)])
async def test_the_ceiling_is_the_engines_own_slot_count_and_64_when_it_is_unknown(
    slots: int, known: bool, ceiling: int, scheduled: Schedulers
) -> None:
    shape = EngineShape(slots=slots, resident=("a",), instance=1, slots_known=known)
    requests = scheduled(shape)
    scheduler = requests.scheduler
    await submit_burst(requests, 120, rounds=50)
    assert len(requests.admitted) == ceiling
    assert scheduler.state().waiting == 120 - ceiling


async def test_slots_taken_by_traffic_pair_did_not_send_are_noticed_and_polled(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2))
    engine = requests.engine
    engine.foreign = {0, 1}
    requests.submit("r1")
    await settle()
    assert requests.admitted == [], "the engine reports no idle slot: nothing is admitted"
    before = engine.samples
    await settle(50)
    assert engine.samples > before, "while everything waits, the engine is polled"
    engine.foreign = {0}
    await settle(50)
    assert requests.admitted == ["r1"]
    assert requests.tasks["r1"].result().slot == 1, "pinned to the slot that is idle"


async def test_the_measurement_bounds_but_never_adds_to_the_ceiling(scheduled: Schedulers) -> None:
    requests = scheduled(pinned(slots=3), engine_slots=8)
    await submit_burst(requests, 5)
    assert len(requests.admitted) == 3, "eight idle slots, but the ceiling is three"


# Turns on a one-model engine.


async def test_a_burst_shares_one_turn_and_another_model_waits_for_it_to_drain(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=4, resident="a"))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("a1", "a")
    requests.submit("b1", "b")
    requests.submit("a2", "a")
    await settle()
    assert requests.admitted == ["a1", "a2"], "the resident model's requests go first"
    assert scheduler.state().turn == "a"
    assert "load b" not in engine.log
    requests.finish("a1")
    await settle()
    assert "load b" not in engine.log, "b is loaded only on a drained engine"
    requests.finish("a2")
    await settle()
    assert engine.log[-2:] == ["load b", "run b1@0"]
    assert scheduler.resident == "b"


async def test_the_turn_absorbs_its_model_at_the_head_but_not_past_another_model(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1, resident="a"))
    engine = requests.engine
    requests.submit("a1", "a")
    await settle()
    requests.submit("a2", "a")  # the head of the queue: absorbed by a's turn
    await settle()
    requests.finish("a1")
    await settle()
    assert requests.admitted == ["a1", "a2"]
    requests.submit("b1", "b")
    await settle()
    requests.submit("a3", "a")  # behind b1: must not extend a's turn past it
    await settle()
    requests.finish("a2")
    await settle()
    assert requests.admitted == ["a1", "a2", "b1"], "b waited for a's claimed requests only"
    requests.finish("b1")
    await settle()
    assert requests.admitted[-1] == "a3"
    assert [line for line in engine.log if line.startswith("load")] == ["load b", "load a"]


async def test_a_failed_load_rejects_only_that_models_requests_with_the_reason(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2, resident="a"))
    engine = requests.engine
    engine.load_fails["broken"] = "failed to load model: bad magic"
    requests.submit("x1", "broken")
    requests.submit("x2", "broken")
    requests.submit("a1", "a")
    await settle()
    # No turn ran yet, so the first request's model (broken) takes the first turn.
    assert engine.log[0] == "load broken"
    for name in ("x1", "x2"):
        with pytest.raises(LoadFailed, match="bad magic"):
            await requests.tasks[name]
    await settle()
    assert requests.admitted == ["a1"], "the other model's request is served"


# Exclusive operations.


async def test_an_exclusive_operation_waits_for_running_requests_and_runs_alone(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2))
    scheduler = requests.scheduler
    requests.submit("r1")
    await settle()
    requests.operation("delete", "delete", "a")
    requests.submit("r2")  # arrived after the delete: waits for it
    await settle()
    assert requests.admitted == ["r1"]
    assert scheduler.state().exclusive_waiting == 1
    requests.finish("r1")
    await settle()
    assert requests.admitted == ["r1", "delete"]
    state = scheduler.state()
    assert state.exclusive is not None and state.exclusive.kind == "delete"
    assert state.waiting == 1
    requests.finish("delete")
    await settle()
    assert requests.admitted == ["r1", "delete", "r2"]


async def test_exclusive_operations_drain_an_engine_that_holds_many_models(
    scheduled: Schedulers,
) -> None:
    shape = EngineShape(slots=1, single_model=False, resident=("a", "b"), instance=1)
    requests = scheduled(shape, engine_slots=2, slot_ids=False)
    requests.submit("a1", "a")
    requests.submit("b1", "b")
    requests.submit("a2", "a")
    await settle()
    assert requests.admitted == ["a1", "b1"], "one slot per model, models side by side"
    requests.operation("load", "load", "c")
    requests.submit("b2", "b")
    await settle()
    requests.finish("a1")
    await settle()
    assert requests.admitted == ["a1", "b1", "a2"], "a2 was queued before the load"
    requests.finish("b1", "a2")
    await settle()
    assert requests.admitted[-1] == "load"
    requests.finish("load")
    await settle()
    assert requests.admitted[-1] == "b2"


# Leaving.


async def test_a_client_that_leaves_while_queued_leaves_the_queue_at_once(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1))
    scheduler = requests.scheduler
    requests.submit("r1")
    requests.submit("r2")
    requests.submit("r3")
    await settle()
    assert scheduler.state().waiting == 2
    requests.tasks["r2"].cancel()
    await settle(2)
    assert scheduler.state().waiting == 1
    requests.finish("r1")
    await settle()
    assert requests.admitted == ["r1", "r3"]


# Slot ownership.


async def test_two_requests_admitted_in_one_pass_never_share_a_slot(scheduled: Schedulers) -> None:
    # The engine always reports every slot idle: it cannot see ours yet.
    requests = scheduled(pinned(slots=4))
    for index in range(4):
        requests.submit(f"r{index}", session=f"s{index}")
    await settle()
    slots = [requests.tasks[f"r{i}"].result().slot for i in range(4)]
    assert sorted(slots) == [0, 1, 2, 3]
    requests.finish("r2")
    requests.submit("r4", session="s4")
    await settle()
    # The engine still reports every slot idle (the others' requests may not have reached
    # it yet): only the released one may be handed out.
    assert requests.tasks["r4"].result().slot == slots[2]


async def test_a_handoff_erases_before_the_request_and_the_same_session_keeps_its_kv(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1))
    engine = requests.engine
    requests.submit("alice1", session="alice")
    await settle()
    requests.finish("alice1")
    await settle()
    assert engine.log == ["run alice1@0"], "a fresh slot is never erased; settling never erases"
    requests.submit("alice2", session="alice")
    await settle()
    requests.finish("alice2")
    requests.submit("bob1", session="bob")
    await settle()
    assert engine.log == ["run alice1@0", "run alice2@0", "erase 0", "run bob1@0"]


async def test_a_keyless_owner_is_nobody_so_whoever_comes_next_gets_an_erase(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("anon1")
    await settle()
    requests.finish("anon1")
    requests.submit("anon2")
    await settle()
    requests.finish("anon2")
    requests.submit("carol", session="carol")
    await settle()
    assert engine.log == ["run anon1@0", "erase 0", "run anon2@0", "erase 0", "run carol@0"]
    assert scheduler.state().slot_owners is not None
    assert scheduler.state().slot_owners.sessions == 1


async def test_an_erase_failure_runs_the_request_unpinned_instead_of_failing_it(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1))
    engine = requests.engine
    requests.submit("a", session="a")
    await settle()
    requests.finish("a")
    engine.erase_fails = True
    requests.submit("b", session="b")
    await settle()
    assert engine.log == ["run a@0", "erase 0", "run b@None"]
    requests.finish("b")
    engine.erase_fails = False
    requests.submit("a2", session="a")
    await settle()
    assert engine.log[-2:] == ["erase 0", "run a2@0"], "the slot's owner became unknown"


async def test_owners_are_forgotten_when_the_engine_relaunches(scheduled: Schedulers) -> None:
    requests = scheduled(pinned(slots=1))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("a", session="a")
    await settle()
    requests.finish("a")
    await settle()
    scheduler.configure(pinned(slots=1, instance=7))
    requests.submit("b", session="b")
    await settle()
    assert engine.log == ["run a@0", "run b@0"], "a relaunched engine's slots are fresh"


async def test_a_model_switch_forgets_owners_and_a_stale_table_does_not_undo_it(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1, resident="a"))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("a1", "a", session="s")
    await settle()
    requests.finish("a1")
    requests.submit("b1", "b", session="t")
    await settle()
    assert engine.log == ["run a1@0", "load b", "run b1@0"], "no erase after a relaunch"
    # A table built before the switch (the old instance, model a) arrives late.
    scheduler.configure(pinned(slots=1, resident="a"))
    assert scheduler.resident == "b"


async def test_the_session_whose_kv_an_idle_slot_holds_goes_first_and_gets_it(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2))
    engine = requests.engine
    requests.submit("x1", session="x")
    requests.submit("y1", session="y")
    await settle()
    slot_of_y = requests.tasks["y1"].result().slot
    requests.finish("x1", "y1")
    await settle()
    engine.foreign = {1 - slot_of_y}  # only y's slot is idle now
    requests.submit("x2", session="x")
    requests.submit("y2", session="y")
    await settle()
    assert requests.admitted[-1] == "y2", "y's KV is in the idle slot: y goes first"
    assert requests.tasks["y2"].result().slot == slot_of_y
    assert "erase" not in " ".join(engine.log)


async def test_state_reports_queues_turn_operation_and_owners(scheduled: Schedulers) -> None:
    changes: list[int] = []
    requests = scheduled(pinned(slots=2, resident="a"), changes=changes)
    engine, scheduler = requests.engine, requests.scheduler
    engine.load_gate = asyncio.Event()
    requests.submit("a1", "a", session="s1")
    requests.submit("a2", "a")
    requests.submit("a3", "a")
    requests.submit("b1", "b")
    await settle()
    state = scheduler.state()
    assert (state.running, state.waiting, state.turn, state.resident) == (2, 2, "a", "a")
    assert {q.model: (q.running, q.waiting) for q in state.queues} == {
        "a": (2, 1),
        "b": (0, 1),
    }
    assert state.slot_owners is not None
    assert (state.slot_owners.sessions, state.slot_owners.keyless) == (1, 1)
    assert changes, "every change is announced"
    requests.finish("a1", "a2")
    await settle()
    requests.finish("a3")
    await settle()
    loading = scheduler.state()
    assert loading.exclusive is not None
    assert (loading.exclusive.kind, loading.exclusive.model) == ("switch", "b")
    engine.load_gate.set()
    await settle()
    assert scheduler.state().resident == "b"


async def test_without_affinity_slots_go_first_free_in_arrival_order(scheduled: Schedulers) -> None:
    """The benchmark's baseline: ownership and erases stay, the preferences go."""
    requests = scheduled(pinned(slots=2), affinity=False)
    engine = requests.engine
    requests.submit("x1", session="x")
    requests.submit("y1", session="y")
    await settle()
    requests.finish("x1", "y1")
    await settle()
    requests.submit("y2", session="y")
    await settle()
    assert engine.log[-2:] == ["erase 0", "run y2@0"], "y's own slot 1 was not preferred"


async def test_a_guessed_slot_count_does_not_limit_an_engine_pair_did_not_configure(
    scheduled: Schedulers,
) -> None:
    shape = EngineShape(slots=1, single_model=False, instance=1, slots_known=False)
    requests = scheduled(shape, slot_ids=False)
    await submit_burst(requests, 5)
    assert len(requests.admitted) == 5, "the adopted engine queues what it cannot run itself"


async def test_a_handed_over_conversation_is_parked_and_restored_when_it_comes_back(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1, parking=True))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("alice1", session="alice")
    await settle()
    requests.finish("alice1")
    requests.submit("bob1", session="bob")
    await settle()
    assert engine.log == ["run alice1@0", "save 0", "erase 0", "run bob1@0"]
    requests.finish("bob1")
    requests.submit("alice2", session="alice")
    await settle()
    assert engine.log[4:] == ["save 0", "erase 0", "restore 0", "run alice2@0"]
    assert scheduler.parking.file_of("alice") is None, "restored: alice's file is stale"
    assert scheduler.parking.file_of("bob") is not None
    await settle()
    assert len(engine.files) == 1, "alice's stale file was deleted"
    state = scheduler.state()
    assert state.slot_owners is not None and state.slot_owners.parked == 1


async def test_a_keyless_owner_is_not_parked_and_a_failed_save_still_erases(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=1, parking=True))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("anon")
    await settle()
    requests.finish("anon")
    requests.submit("carol1", session="carol")
    await settle()
    assert engine.log == ["run anon@0", "erase 0", "run carol1@0"]
    requests.finish("carol1")
    engine.park_fails = True
    requests.submit("dave", session="dave")
    await settle()
    assert engine.log[3:] == ["save 0", "erase 0", "run dave@0"]
    assert scheduler.parking.file_of("carol") is None


async def test_a_relaunch_drops_every_parked_conversation(scheduled: Schedulers) -> None:
    requests = scheduled(pinned(slots=1, parking=True))
    engine, scheduler = requests.engine, requests.scheduler
    requests.submit("a1", session="a")
    await settle()
    requests.finish("a1")
    requests.submit("b1", session="b")
    await settle()
    requests.finish("b1")
    assert len(engine.files) == 1
    scheduler.configure(pinned(slots=1, instance=9, parking=True))
    await settle()
    assert engine.files == {} and len(scheduler.parking) == 0
    requests.submit("a2", session="a")
    await settle()
    assert engine.log[-1] == "run a2@0" and "restore 0" not in engine.log


async def test_when_every_idle_slot_is_another_sessions_the_longest_unused_one_goes(
    scheduled: Schedulers,
) -> None:
    requests = scheduled(pinned(slots=2))
    requests.submit("x", session="x")
    requests.submit("y", session="y")
    await settle()
    x_slot = requests.tasks["x"].result().slot
    requests.finish("y")
    await settle()
    requests.finish("x")
    requests.submit("z", session="z")
    await settle()
    assert requests.tasks["z"].result().slot == x_slot, "x's slot was handed out longest ago"
    requests.finish("z")
    requests.submit("w", session="w")
    await settle()
    assert requests.tasks["w"].result().slot == 1 - x_slot, "then y's, not z's again"


async def test_a_request_with_room_is_admitted_at_once_and_one_without_waits_its_turn(
    scheduled: Schedulers,
) -> None:
    # An engine that holds many models and pins no slots (Ollama's shape): two slots for "a".
    changes: list[int] = []
    shape = EngineShape(slots=2, single_model=False, resident=("a",), instance=1)
    scheduler = scheduled(shape, changes=changes).scheduler
    first = scheduler.admit_now("a", session="s1")
    second = scheduler.admit_now("a")
    assert first is not None and second is not None
    assert first.admitted.done() and second.admitted.done()
    assert scheduler.state().running == 2 and len(changes) >= 2, "admissions are announced"
    assert scheduler.admit_now("a") is None, "no room left: it must wait in the queue"
    third = asyncio.create_task(scheduler.admit("a"))
    await settle()
    assert not third.done() and scheduler.state().waiting == 1
    assert scheduler.admit_now("b") is None, "nothing goes past a queued request"
    scheduler.release(first)
    assert (await asyncio.wait_for(third, 1.0)).admitted.done()
    scheduler.release(second)
    assert scheduler.state().running == 1
    assert scheduler.admit_now("a") is not None
