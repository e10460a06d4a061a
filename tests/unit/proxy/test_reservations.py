"""Reservations as a frozen value: each snapshot, reservation and release makes a new one."""

from __future__ import annotations

import pytest

from backend.workers.proxy.routing.candidates import (
    NodeLoad,
    Reservations,
    least_loaded,
    pending_and_held,
    released,
    reserved,
    score,
    with_snapshot,
)

IDLE = {"a": NodeLoad(), "b": NodeLoad(), "c": NodeLoad()}


def _snapshot(generation: int = 1, **pending: int) -> Reservations:
    loads = {node: NodeLoad(pending=count) for node, count in pending.items()}
    return with_snapshot(Reservations(), generation, {**IDLE, **loads})


def test_a_reservation_makes_a_new_value_and_leaves_the_old_one_as_it_was() -> None:
    table = _snapshot(a=2)
    after = reserved(reserved(table, "a"), "b")
    assert pending_and_held(after, "a") == (2, 1)
    assert pending_and_held(after, "b") == (0, 1)
    assert pending_and_held(table, "a") == (2, 0), "the value it came from is unchanged"
    assert after.generation == table.generation and after.loads is table.loads


def test_a_newer_snapshot_resets_the_held_counts() -> None:
    table = reserved(reserved(_snapshot(1), "a"), "a")
    newer = with_snapshot(table, 2, {"a": NodeLoad(pending=2)})
    assert (newer.generation, pending_and_held(newer, "a")) == (2, (2, 0))
    assert pending_and_held(newer, "zzz") == (0, 0), "a node the snapshot does not list"


def test_an_older_or_equal_snapshot_is_ignored() -> None:
    table = reserved(_snapshot(3), "a")
    assert with_snapshot(table, 2, {"a": NodeLoad(pending=9)}) is table
    assert with_snapshot(table, 3, {"a": NodeLoad(pending=9)}) is table


def test_a_release_under_an_older_generation_is_ignored() -> None:
    table = reserved(_snapshot(1), "a")
    newer = reserved(with_snapshot(table, 2, IDLE), "a")
    assert released(newer, "a", 1) is newer
    assert pending_and_held(released(newer, "a", 2), "a") == (0, 0)


def test_a_release_never_goes_below_none() -> None:
    table = reserved(reserved(_snapshot(1), "a"), "a")
    once = released(table, "a", 1)
    assert pending_and_held(once, "a") == (0, 1)
    gone = released(once, "a", 1)
    assert "a" not in gone.held
    assert released(gone, "a", 1) is gone
    assert released(gone, "never-reserved", 1) is gone


def test_the_score_is_pending_plus_pressure_plus_reservations() -> None:
    table = with_snapshot(Reservations(), 1, {"a": NodeLoad(pending=2, gpu_pressure=1)})
    assert score(reserved(table, "a"), "a") == 4
    assert score(table, "unknown") == 0


def test_ties_keep_the_candidates_order() -> None:
    table = _snapshot()
    assert least_loaded(table, ["b", "a", "c"]) == "b"
    assert least_loaded(reserved(table, "b"), ["b", "a", "c"]) == "a"
    assert least_loaded(_snapshot(b=1), ["b", "c", "a"]) == "c"


def test_a_pin_wins_however_loaded() -> None:
    table = reserved(_snapshot(a=5), "a")
    assert least_loaded(table, ["a", "b"], pinned=True) == "a"
    assert least_loaded(table, ["a", "b"]) == "b"


def test_the_credit_is_taken_off_a_nodes_load_before_comparing() -> None:
    table = _snapshot(b=1)
    assert least_loaded(table, ["a", "b"], credit={"b": 1.5}) == "b", "1 - 1.5 beats 0"
    assert least_loaded(_snapshot(b=2), ["a", "b"], credit={"b": 1.5}) == "a", "2 - 1.5 does not"
    assert least_loaded(table, ["a", "b"], credit={"b": 1.0}) == "a", "a tie keeps the order"


def test_no_candidate_is_an_error() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        least_loaded(_snapshot(), [])
