"""The scheduler's view of an engine's idle slots (``slot_view``): PAIR's own requests need no
read of ``/slots``, while traffic PAIR did not send is still noticed (docs/SCHEDULER.md,
"Capacity")."""

from __future__ import annotations

import asyncio
import logging

import pytest

from backend.workers.proxy.scheduler.engine_scheduler import EngineShape
from backend.workers.proxy.scheduler.slot_view import (
    REFRESH_AFTER_S,
    TRUSTED_WHILE_READING_S,
    VIEW_FRESH_S,
)
from tests.fakes import FakeClock
from tests.unit.proxy.scheduler_fakes import Requests, Schedulers, pinned, settle

pytest_plugins = ["tests.unit.proxy.scheduler_support"]


async def alice_admitted(
    scheduled: Schedulers,
    shape: EngineShape | None = None,
    *,
    clock: FakeClock | None = None,
    foreign: frozenset[int] = frozenset(),
) -> Requests:
    """A scheduler of a pinned engine (two slots unless ``shape`` says), ``foreign`` slots
    taken by traffic PAIR did not send, once alice's request ``r1`` has been let in."""
    requests = scheduled(shape or pinned(slots=2), clock=clock)
    requests.engine.foreign = set(foreign)
    requests.submit("r1", session="alice")
    await settle()
    return requests


async def test_a_lone_request_after_another_is_sent_without_reading_the_slots_again(
    scheduled: Schedulers,
) -> None:
    requests = await alice_admitted(scheduled)
    engine = requests.engine
    requests.finish("r1")
    await settle()
    assert engine.samples == 1
    requests.submit("r2", session="alice")
    await settle()
    assert requests.admitted == ["r1", "r2"]
    assert engine.samples == 1, "the slot alice's request left is known idle: no read"
    assert engine.log == ["run r1@0", "run r2@0"], "the same slot, its KV kept: no erase"


async def test_traffic_pair_did_not_send_is_noticed_once_the_view_is_no_longer_fresh(
    scheduled: Schedulers,
) -> None:
    clock = FakeClock()
    requests = await alice_admitted(scheduled, clock=clock)
    engine = requests.engine
    requests.finish("r1")
    engine.foreign = {0}  # a client of the engine's own port takes alice's slot
    clock.now += VIEW_FRESH_S + 0.1
    requests.submit("r2", session="alice")
    await settle()
    assert engine.samples == 2, "a view older than its freshness is read again"
    assert requests.tasks["r2"].result().slot == 1, "the slot taken from outside is not given"


async def test_a_view_that_leaves_no_room_is_read_again_before_anyone_waits(
    scheduled: Schedulers,
) -> None:
    clock = FakeClock()
    requests = await alice_admitted(scheduled, clock=clock, foreign=frozenset({1}))
    engine = requests.engine
    engine.foreign = set()  # the outside request ended: only a read can tell
    requests.submit("r2", session="bob")
    await settle()
    assert requests.admitted == ["r1", "r2"]
    assert requests.tasks["r2"].result().slot == 1
    assert engine.samples == 2
    assert clock.sleeps == [], "admitted on the read, not after a poll"


async def test_a_request_whose_client_left_makes_the_next_one_read_the_engine(
    scheduled: Schedulers,
) -> None:
    requests = await alice_admitted(scheduled)
    engine = requests.engine
    requests.finish("r1", finished=False)  # the engine may still be generating it
    engine.foreign = {0}
    requests.submit("r2", session="alice")
    await settle()
    assert engine.samples == 2
    assert requests.tasks["r2"].result().slot == 1


async def test_a_relaunch_or_a_request_that_ran_unpinned_drops_the_view(
    scheduled: Schedulers,
) -> None:
    requests = await alice_admitted(scheduled, pinned(slots=1, instance=1))
    engine, scheduler = requests.engine, requests.scheduler
    requests.finish("r1")
    scheduler.configure(pinned(slots=1, instance=2))  # restarted: the view is of the old one
    requests.submit("r2", session="bob")
    await settle()
    assert engine.samples == 2
    engine.erase_fails = True
    requests.finish("r2")
    requests.submit("r3", session="carol")  # bob's slot: the erase fails, r3 runs unpinned
    await settle()
    assert requests.tasks["r3"].result().slot is None
    assert engine.samples == 2, "bob's slot was known idle"
    requests.finish("r3")
    requests.submit("r4", session="carol")
    await settle()
    assert engine.samples == 3, "after a request the engine placed itself, it is read again"


async def test_a_slot_left_while_the_slots_were_being_read_counts_idle(
    scheduled: Schedulers,
) -> None:
    clock = FakeClock()
    requests = await alice_admitted(scheduled, clock=clock)
    engine = requests.engine
    engine.foreign = {0}  # alice's request as the engine shows it: busy
    clock.now += VIEW_FRESH_S + 0.1
    engine.read_gate = asyncio.Event()
    requests.submit("r2", session="bob")
    await settle()
    requests.finish("r1")  # answered while the read was on its way
    engine.foreign = set()
    engine.read_gate.set()
    await settle()
    assert requests.tasks["r2"].result().slot == 1
    requests.submit("r3", session="alice")
    await settle()
    assert engine.samples == 2, "the slot alice's request left is known idle: no read"
    assert requests.tasks["r3"].result().slot == 0


async def test_a_request_the_view_has_an_idle_slot_for_is_admitted_without_a_pass(
    scheduled: Schedulers,
) -> None:
    clock = FakeClock()
    requests = scheduled(pinned(slots=2, resident="a"), clock=clock)
    scheduler = requests.scheduler
    assert scheduler.admit_now("a", session="alice") is None, "nothing read yet: a pass reads"
    requests.submit("r1", session="alice")
    requests.submit("r2", session="bob")
    await settle()
    requests.finish("r1", "r2")
    assert scheduler.state().turn is None, "a drained turn with nothing waiting ends at once"
    alice = scheduler.admit_now("a", session="alice")
    assert alice is not None and alice.slot == 0, "her own slot, known idle"
    assert scheduler.state().turn == "a"
    assert scheduler.admit_now("b", session="carol") is None, "another model waits its turn"
    assert scheduler.admit_now("a", session="carol") is None, "bob's slot needs an erase"
    assert scheduler.admit_now("a", session="bob") is not None, "his own slot"
    assert scheduler.admit_now("a", session="bob") is None, "two slots, two running"
    assert requests.engine.samples == 1


async def test_a_request_that_ends_while_the_slots_are_read_does_not_fail_the_pass(
    scheduled: Schedulers, caplog: pytest.LogCaptureFixture
) -> None:
    """The slots PAIR's running requests hold are those of when the read answers: one that
    ended while it was on its way holds none (the pass read them before the answer, and
    failed on the change: "Set changed size during iteration")."""
    clock = FakeClock()
    requests = await alice_admitted(scheduled, clock=clock, foreign=frozenset({1}))
    engine = requests.engine
    engine.read_gate = asyncio.Event()
    clock.now += VIEW_FRESH_S + 0.1  # the view is stale: the next request reads the slots
    requests.submit("r2", session="bob")
    await settle()
    assert engine.samples == 2 and requests.admitted == ["r1"], "r2 waits for the read"
    requests.finish("r1")  # alice's request ends while the read is on its way
    await settle()
    engine.read_gate.set()
    await settle()
    assert requests.admitted == ["r1", "r2"]
    assert requests.tasks["r2"].result().slot == 0, "alice's slot was left: it is idle"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_request_let_in_by_an_older_view_reads_the_slots_in_the_background(
    scheduled: Schedulers,
) -> None:
    clock = FakeClock()
    requests = await alice_admitted(scheduled, pinned(slots=3), clock=clock)
    engine = requests.engine
    requests.finish("r1")
    await settle()
    clock.now += REFRESH_AFTER_S + 0.1  # still fresh, but due for a read
    engine.foreign = {1}  # a client of the engine's own port takes slot 1
    engine.read_gate = asyncio.Event()  # the engine is slow to list its slots
    requests.submit("r2", session="alice")
    await settle()
    assert requests.admitted == ["r1", "r2"], "the request waited for the read"
    assert engine.samples == 2, "no read was started behind it"
    engine.read_gate.set()
    await settle()
    requests.submit("r3", session="bob")
    await settle()
    assert requests.tasks["r3"].result().slot == 2, "the read's answer was not taken"
    assert engine.samples == 2


async def test_while_a_read_is_on_its_way_the_view_still_lets_requests_in(
    scheduled: Schedulers,
) -> None:
    """A busy engine may take seconds to list its slots: PAIR's own requests do not wait for
    it while the view is recent, and a decision that needs a read shares the one on its way."""
    clock = FakeClock()
    requests = await alice_admitted(scheduled, pinned(slots=3), clock=clock)
    engine = requests.engine
    requests.finish("r1")
    await settle()
    clock.now += REFRESH_AFTER_S + 0.1
    engine.read_gate = asyncio.Event()
    requests.submit("r2", session="alice")  # starts the read
    await settle()
    clock.now += VIEW_FRESH_S  # past fresh: only the read on its way keeps the view trusted
    requests.submit("r3", session="bob")
    await settle()
    assert requests.admitted == ["r1", "r2", "r3"]
    clock.now += TRUSTED_WHILE_READING_S  # a read this late no longer vouches for the view
    requests.submit("r4", session="carol")
    await settle()
    assert requests.admitted == ["r1", "r2", "r3"], "let in on a view too old"
    assert engine.samples == 2, "the decision started a second read instead of waiting"
    engine.read_gate.set()
    await settle()
    assert requests.admitted == ["r1", "r2", "r3", "r4"]
