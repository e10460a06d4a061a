"""Late binding's decisions (``rebalance.plan_moves``, ``failover.moved``) and where a queued
request stands in its scheduler (``EngineScheduler.ahead``)."""

from __future__ import annotations

import asyncio

from backend.workers.proxy.routing import failover
from backend.workers.proxy.routing.failover import RetryPolicy
from backend.workers.proxy.routing.placement.inputs import Candidate, Pace
from backend.workers.proxy.routing.rebalance import Waiter, plan_moves
from backend.workers.proxy.scheduler.engine_scheduler import EngineShape
from tests.unit.proxy.scheduler_fakes import FakeEngine, make, settle

# One second an answer everywhere: a 0.2 s first token and 40 tokens at 50 tokens/s.
PACE = Pace(tokens_per_s=50.0, first_token_s=0.2)
ANSWER = 40.0
HERE = Candidate("a", slots=1, resident=True, pace=PACE)


def _other(node: str, *, pending: int = 0, resident: bool = True, load_s: float = 12) -> Candidate:
    pace = Pace(tokens_per_s=50.0, first_token_s=0.2, load_s=load_s)
    return Candidate(node, pending=pending, slots=1, resident=resident, pace=pace)


def _queue(count: int) -> list[Waiter]:
    """``count`` requests waiting behind the one running here (keys 1..count, oldest first)."""
    return [Waiter(key, ahead=key) for key in range(1, count + 1)]


def test_a_free_copy_takes_the_newest_waiters_until_the_queues_even_out() -> None:
    moves = plan_moves(_queue(6), HERE, [_other("b")], ANSWER)

    # Here the 6th waits for 6 answers (7 s to its end); at b it is served at once (1 s).
    assert [key for key, _ in moves] == [6, 5, 4]
    assert {node for _, node in moves} == {"b"}


def test_two_free_copies_share_the_queue() -> None:
    moves = plan_moves(_queue(9), HERE, [_other("b"), _other("c")], ANSWER)

    assert [key for key, _ in moves] == [9, 8, 7, 6, 5, 4]
    assert sorted(node for _, node in moves) == ["b", "b", "b", "c", "c", "c"]


def test_a_small_gain_does_not_move_anything() -> None:
    # The one waiter here ends in 2 s. A copy busy with one job would take 2 s too: it stays.
    # A free copy takes 1 s: 1 s sooner, and half its time, clears both bars: it moves.
    assert plan_moves(_queue(1), HERE, [_other("b", pending=1)], ANSWER) == []
    assert plan_moves(_queue(1), HERE, [_other("b")], ANSWER) == [(1, "b")]


def test_a_copy_still_loading_takes_only_what_would_wait_longer_than_its_load() -> None:
    cold = _other("b", resident=False, load_s=12.0)

    assert plan_moves(_queue(6), HERE, [cold], ANSWER) == []
    moves = plan_moves(_queue(20), HERE, [cold], ANSWER)
    assert moves and all(key >= 14 for key, _ in moves), moves


def test_nothing_moves_without_another_owner_or_a_waiter() -> None:
    assert plan_moves(_queue(5), HERE, [], ANSWER) == []
    assert plan_moves([], HERE, [_other("b")], ANSWER) == []


def test_a_move_gives_the_dispatch_back_and_lets_the_node_be_tried_again() -> None:
    state = failover.started(RetryPolicy(), 0.0, None)
    state = failover.dispatched(state, "a")

    moved = failover.moved(state, "a")

    assert moved.budget.dispatches == 0
    assert moved.tried == ()
    assert moved.attempt == state.attempt, "the next attempt is numbered after it"
    assert failover.untried(moved, [], 1.0) == []


async def test_ahead_counts_what_runs_and_waits_before_a_ticket() -> None:
    scheduler = make(FakeEngine(), EngineShape(slots=1, resident=("m",)))
    running = await scheduler.admit("m")
    made: list[object] = []
    waiting = [asyncio.create_task(scheduler.admit("m", made=made.append)) for _ in range(3)]
    await settle()

    assert [scheduler.ahead(ticket) for ticket in made] == [1, 2, 3]  # type: ignore[arg-type]
    waiting[0].cancel()
    await settle()
    assert [scheduler.ahead(ticket) for ticket in made] == [None, 1, 2]  # type: ignore[arg-type]
    scheduler.release(running)
    for task in waiting[1:]:
        scheduler.release(await task)
    await scheduler.aclose()
