"""The failover policy (``routing.failover``): the budget, the backoff and one request's
decisions, as plain calls with scripted time and jitter."""

from __future__ import annotations

import random

import pytest

from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget
from backend.workers.proxy.routing import failover
from backend.workers.proxy.routing.candidates import vanished
from backend.workers.proxy.routing.choice import placement_chooses
from backend.workers.proxy.routing.failover import (
    AWAY_WAIT_S,
    Away,
    Backoff,
    BadGateway,
    Failover,
    GiveUp,
    Relayed,
    RetryPolicy,
    Unreachable,
    Vanished,
)
from backend.workers.proxy.upstream.attempt import Failure

A = RouteTarget(node_id="a", kind="peer", base_url="https://a", models=["m"])
B = RouteTarget(node_id="b", kind="peer", base_url="https://b", models=["m"])
C = RouteTarget(node_id="c", kind="local", base_url="http://c", models=["m"])
REFUSED = Failure("transport", "connection refused")
BUSY = Failure("status", "busy", status=503)


class Jitter:
    """Hands out the given values in order (``random.Random.uniform``'s place)."""

    def __init__(self, *values: float) -> None:
        self._values = list(values)

    def uniform(self, a: float, b: float, /) -> float:
        assert (a, b) == (-0.25, 0.25)
        return self._values.pop(0)


def _after(state: Failover, *nodes: str, failure: Failure = REFUSED) -> Failover:
    for node in nodes:
        state = failover.failed(failover.dispatched(state, node), failure)
    return state


def test_backoff_doubles_to_eight_seconds_with_bounded_jitter() -> None:
    rng = random.Random(7)
    for dispatches, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        for _ in range(50):
            assert 0.75 * base <= failover.backoff(dispatches, rng) <= 1.25 * base


def test_budget_allows_five_dispatches_and_nothing_after_the_deadline() -> None:
    rng = random.Random(1)
    budget = failover.Budget(created_at=0.0)
    for _ in range(5):
        assert budget.may_dispatch(1.0)
        budget = budget.dispatched()
    assert not budget.may_dispatch(1.0)
    assert budget.wait_before_next(1.0, rng) is None
    fresh = failover.Budget(created_at=0.0).dispatched()
    assert fresh.wait_before_next(599.5, rng) is None, "no round may end past the deadline"
    assert fresh.wait_before_next(10.0, rng) is not None


def test_a_request_starts_with_a_fresh_budget_or_after_its_last_attempt() -> None:
    fresh = failover.started(RetryPolicy(max_dispatches=3, deadline_s=60.0), 100.0, None)
    assert (fresh.attempt, fresh.tried, fresh.last) == (0, (), None)
    assert (fresh.budget.created_at, fresh.budget.max_dispatches) == (100.0, 3)
    assert fresh.budget.deadline_s == 60.0
    assert failover.started(RetryPolicy(), 0.0, 3).attempt == 2, "resumed as attempt 3"


def test_a_round_tries_each_candidate_once_in_order() -> None:
    state = failover.started(RetryPolicy(), 0.0, None)
    assert failover.untried(state, [A, B, C], 0.0) == [A, B, C]
    state = _after(state, "a")
    assert failover.untried(state, [A, B, C], 1.0) == [B, C]
    state = _after(state, "c")
    assert failover.untried(state, [A, B, C], 2.0) == [B]
    assert (state.attempt, state.tried, state.budget.dispatches) == (2, ("a", "c"), 2)
    assert failover.untried(failover.next_round(state), [A, B, C], 3.0) == [A, B, C]


def test_no_candidate_once_the_budget_is_spent_or_the_deadline_passed() -> None:
    state = failover.started(RetryPolicy(max_dispatches=2, deadline_s=10.0), 0.0, None)
    assert failover.untried(state, [A], 9.9) == [A]
    assert failover.untried(state, [A], 10.0) == []
    spent = failover.next_round(_after(state, "a", "b"))
    assert failover.untried(spent, [A, B, C], 1.0) == []


def test_a_round_that_served_nobody_backs_off_with_jitter() -> None:
    state = _after(failover.started(RetryPolicy(), 0.0, None), "a", "b")
    end = failover.round_ended(state, 1.0, Jitter(0.25), pinned=False, vanished=False)
    assert end == Backoff(2.0 * 1.25), "two dispatches: the second step of 1, 2, 4, 8"


def test_a_pinned_request_gets_one_round_and_a_vanished_model_ends_at_once() -> None:
    state = _after(failover.started(RetryPolicy(), 0.0, None), "a")
    assert failover.round_ended(state, 1.0, Jitter(), pinned=True, vanished=True) == GiveUp()
    assert failover.round_ended(state, 1.0, Jitter(), pinned=False, vanished=True) == Vanished()


def test_no_backoff_that_would_end_past_the_deadline() -> None:
    state = _after(failover.started(RetryPolicy(deadline_s=10.0), 0.0, None), "a")
    early = failover.round_ended(state, 8.5, Jitter(0.25), pinned=False, vanished=False)
    late = failover.round_ended(state, 9.0, Jitter(0.25), pinned=False, vanished=False)
    assert early == Backoff(1.25)
    assert late == GiveUp()


def test_a_request_whose_only_owner_went_away_is_answered_within_the_away_wait() -> None:
    # Caught at 3 s by its member's link going down: the backoffs stop at the end of the wait
    # for the member (not at 1, 2, 4, 8 s), and the answer names it then.
    state = _after(failover.started(RetryPolicy(), 0.0, None), "a", "b", "a")
    state = failover.awaiting(state, True, 3.0)
    first = failover.round_ended(state, 3.0, Jitter(0.25), pinned=False, vanished=False)
    assert first == Backoff(AWAY_WAIT_S), "the third step (4 s) is cut to the away wait"
    end = failover.round_ended(state, 3.0 + AWAY_WAIT_S, Jitter(), pinned=False, vanished=False)
    assert end == Away()
    assert AWAY_WAIT_S <= 2.0, "link down (3 s) plus the wait stays near the 5 s budget"


def test_a_whole_request_scripted_round_by_round() -> None:
    """Two nodes that refuse: two rounds of two, a backoff between, the fifth try gives up."""
    state = failover.started(RetryPolicy(max_dispatches=5, schedule=(1.0, 2.0)), 0.0, None)
    now, waits, trail = 0.0, [], []
    jitter = Jitter(0.0, -0.25)
    while True:
        found = failover.untried(state, [A, B], now)
        if found:
            trail.append(found[0].node_id)
            state = _after(state, found[0].node_id)
            continue
        end = failover.round_ended(state, now, jitter, pinned=False, vanished=False)
        if not isinstance(end, Backoff):
            break
        waits.append(end.seconds)
        now += end.seconds
        state = failover.next_round(state)
    assert trail == ["a", "b", "a", "b", "a"]
    assert waits == [2.0, 1.5]
    assert end == GiveUp()
    assert failover.final_answer(state, now) == BadGateway(502, "connection refused")


def test_the_final_answer_of_a_request_that_gave_up() -> None:
    fresh = failover.started(RetryPolicy(max_dispatches=1), 0.0, None)
    assert failover.final_answer(fresh, 0.0) == Unreachable(), "nobody was tried"
    assert failover.final_answer(_after(fresh, "a", failure=BUSY), 0.0) == Relayed(BUSY)
    silent = Failure("no-content", "no first byte in time")
    assert failover.final_answer(_after(fresh, "a", failure=silent), 0.0) == BadGateway(
        504, "no first byte in time"
    )
    roomy = failover.started(RetryPolicy(max_dispatches=5), 0.0, None)
    assert failover.final_answer(_after(roomy, "a"), 1.0) == Unreachable(), "budget left, nobody"
    assert failover.final_answer(_after(roomy, "a", failure=BUSY), 1.0) == Relayed(BUSY)


def test_placement_chooses_only_among_several_without_a_leading_pin() -> None:
    assert not placement_chooses([A], None)
    assert placement_chooses([A, B], None)
    assert placement_chooses([A, B], "b")
    assert not placement_chooses([A, B], "a")


@pytest.mark.parametrize(
    ("status", "held"), [(429, True), (503, True), (500, False), (None, False)]
)
def test_busy_answers_hold_the_node(status: int | None, held: bool) -> None:
    failure = Failure("status", "x", status=status) if status else Failure("transport", "x")
    assert failover.holds_busy(failure) is held


def test_busy_reply_only_when_every_owner_is_held() -> None:
    until = {"a": 12.0, "b": 10.5}
    assert failover.busy_retry_after(until, ["a", "b"], 10.0) == 1, "ceil(0.5), at least 1"
    assert failover.busy_retry_after(until, ["a"], 10.0) == 2
    assert failover.busy_retry_after(until, ["a", "c"], 10.0) is None, "c is free"
    assert failover.busy_retry_after(until, ["a", "b"], 11.0) is None, "b's hold ran out"
    assert failover.busy_retry_after(until, [], 10.0) is None


def test_a_busy_hold_is_a_new_mapping_and_a_commit_frees_the_node() -> None:
    free: dict[str, float] = {}
    held = failover.busy_held(free, "a", 10.0)
    assert held == {"a": 10.0 + failover.BUSY_HOLD_S} and free == {}, "the old one is unchanged"
    both = failover.busy_held(held, "b", 11.0)
    assert failover.busy_retry_after(both, ["a", "b"], 11.0) == 1
    assert failover.busy_freed(both, "a") == {"b": 11.0 + failover.BUSY_HOLD_S}
    assert both == {"a": 12.0, "b": 13.0}, "freeing does not change it either"
    assert failover.busy_freed(held, "b") is held, "a node that was not held: nothing to copy"


def test_a_model_vanished_when_no_owner_lists_it_and_no_member_brings_it_back() -> None:
    table = ProxyTargets(node_id="c", engines={"ollama": [C]})
    assert not vanished(table, "m")
    assert vanished(table, "other")
    away = AwayModels(node_id="a", name="A", engine="ollama", models=["other"])
    coming_back = ProxyTargets(node_id="c", engines={"ollama": [C]}, away=[away])
    assert not vanished(coming_back, "other")
