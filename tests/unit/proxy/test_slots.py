"""Engine slots per model: first in, first out; output proves a slot; leaving frees one."""

from __future__ import annotations

import asyncio

from backend.workers.proxy.slots import SlotTracker, Ticket


def _enter(tracker: SlotTracker, model: str, capacity: int, log: list[str], name: str) -> Ticket:
    return tracker.enter(model, capacity, on_running=lambda: log.append(name))


def test_requests_up_to_capacity_run_at_once_and_the_rest_wait() -> None:
    tracker, log = SlotTracker(), []
    tickets = [_enter(tracker, "llama3", 2, log, name) for name in ("a", "b", "c", "d")]
    assert [t.running.is_set() for t in tickets] == [True, True, False, False]
    assert log == ["a", "b"]
    assert tracker.counts("llama3") == (2, 2)
    assert tracker.pending() == 4


def test_a_freed_slot_goes_to_the_oldest_waiting_request() -> None:
    tracker, log = SlotTracker(), []
    first = _enter(tracker, "llama3", 1, log, "a")
    second = _enter(tracker, "llama3", 1, log, "b")
    third = _enter(tracker, "llama3", 1, log, "c")
    tracker.leave(first)
    assert log == ["a", "b"]
    assert (second.running.is_set(), third.running.is_set()) == (True, False)
    tracker.leave(second)
    assert log == ["a", "b", "c"]
    assert tracker.counts("llama3") == (1, 0)


def test_output_from_a_waiting_request_promotes_it_past_the_count() -> None:
    tracker, log = SlotTracker(), []
    first = _enter(tracker, "llama3", 1, log, "a")
    second = _enter(tracker, "llama3", 1, log, "b")
    third = _enter(tracker, "llama3", 1, log, "c")
    tracker.output(third)
    assert log == ["a", "c"]
    assert third.running.is_set() and not second.running.is_set()
    assert tracker.counts("llama3") == (2, 1)
    # Two hold slots of a one-slot engine: the first leaving frees nothing for the waiter.
    tracker.leave(first)
    assert not second.running.is_set()
    assert tracker.counts("llama3") == (1, 1)
    tracker.leave(third)
    assert second.running.is_set()
    assert log == ["a", "c", "b"]


def test_output_for_a_running_or_left_request_changes_nothing() -> None:
    tracker, log = SlotTracker(), []
    running = _enter(tracker, "llama3", 1, log, "a")
    waiting = _enter(tracker, "llama3", 1, log, "b")
    tracker.output(running)
    assert log == ["a"]
    assert tracker.counts("llama3") == (1, 1)
    tracker.leave(waiting)
    tracker.output(waiting)
    assert log == ["a"]
    assert not waiting.running.is_set()
    assert tracker.counts("llama3") == (1, 0)


def test_a_waiting_request_that_leaves_gives_up_its_place_and_never_runs() -> None:
    tracker, log = SlotTracker(), []
    first = _enter(tracker, "llama3", 1, log, "a")
    gone = _enter(tracker, "llama3", 1, log, "b")
    after = _enter(tracker, "llama3", 1, log, "c")
    tracker.leave(gone)
    assert tracker.counts("llama3") == (1, 1)
    tracker.leave(first)
    assert log == ["a", "c"]
    assert after.running.is_set() and not gone.running.is_set()


def test_leaving_twice_frees_one_slot_only() -> None:
    tracker, log = SlotTracker(), []
    first = _enter(tracker, "llama3", 2, log, "a")
    _enter(tracker, "llama3", 2, log, "b")
    _enter(tracker, "llama3", 2, log, "c")
    _enter(tracker, "llama3", 2, log, "d")
    tracker.leave(first)
    tracker.leave(first)
    assert log == ["a", "b", "c"]
    assert tracker.counts("llama3") == (2, 1)


def test_on_running_is_called_inside_enter_when_a_slot_is_free() -> None:
    tracker = SlotTracker()
    seen: list[tuple[int, int]] = []
    ticket = tracker.enter("llama3", 1, on_running=lambda: seen.append(tracker.counts("llama3")))
    # Called before enter returned, with the request already counted as holding its slot.
    assert seen == [(1, 0)]
    assert ticket.running.is_set()


def test_on_running_is_called_once_when_promoted_and_not_at_enter() -> None:
    tracker, calls = SlotTracker(), []
    first = tracker.enter("llama3", 1)
    second = tracker.enter("llama3", 1, on_running=lambda: calls.append("second"))
    assert calls == []
    tracker.leave(first)
    assert calls == ["second"]
    tracker.output(second)
    assert calls == ["second"]


def test_a_larger_capacity_promotes_waiting_requests_in_arrival_order() -> None:
    tracker, log = SlotTracker(), []
    _enter(tracker, "llama3", 1, log, "a")
    _enter(tracker, "llama3", 1, log, "b")
    _enter(tracker, "llama3", 1, log, "c")
    _enter(tracker, "llama3", 3, log, "d")
    assert log == ["a", "b", "c"]
    assert tracker.counts("llama3") == (3, 1)


def test_a_smaller_capacity_keeps_running_requests_and_holds_new_ones() -> None:
    tracker, log = SlotTracker(), []
    first = _enter(tracker, "llama3", 2, log, "a")
    second = _enter(tracker, "llama3", 2, log, "b")
    _enter(tracker, "llama3", 1, log, "c")
    assert log == ["a", "b"]
    assert tracker.counts("llama3") == (2, 1)
    tracker.leave(first)
    assert log == ["a", "b"]  # one still holds the single slot
    tracker.leave(second)
    assert log == ["a", "b", "c"]


def test_a_capacity_below_one_counts_as_one() -> None:
    tracker, log = SlotTracker(), []
    _enter(tracker, "llama3", 0, log, "a")
    _enter(tracker, "llama3", -3, log, "b")
    assert log == ["a"]
    assert tracker.counts("llama3") == (1, 1)


def test_models_queue_independently() -> None:
    tracker, log = SlotTracker(), []
    _enter(tracker, "llama3", 1, log, "a")
    _enter(tracker, "llama3", 1, log, "b")
    _enter(tracker, "qwen", 1, log, "c")
    assert log == ["a", "c"]
    assert tracker.counts("llama3") == (1, 1)
    assert tracker.counts("qwen") == (1, 0)
    assert tracker.counts("unknown") == (0, 0)
    assert tracker.pending() == 3


def test_queues_are_dropped_once_empty() -> None:
    tracker = SlotTracker()
    tickets = [tracker.enter(model, 1) for model in ("llama3", "llama3", "qwen")]
    for ticket in reversed(tickets):
        tracker.leave(ticket)
    assert tracker.pending() == 0
    assert tracker.counts("llama3") == (0, 0)
    # Nothing kept for models with no requests (the tracker lives as long as the engine).
    assert tracker._queues == {}
    # A later request starts a fresh queue with the capacity it brings.
    log: list[str] = []
    _enter(tracker, "llama3", 2, log, "x")
    _enter(tracker, "llama3", 2, log, "y")
    assert log == ["x", "y"]


async def test_a_request_waiting_on_its_ticket_wakes_when_promoted() -> None:
    tracker = SlotTracker()
    first = tracker.enter("llama3", 1)
    second = tracker.enter("llama3", 1)
    waiter = asyncio.ensure_future(second.running.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    tracker.leave(first)
    await asyncio.wait_for(waiter, timeout=1.0)
    assert second.running.is_set()
