"""The owned broker's restart budget: 3 restarts in any 60 s, with a patched clock."""

from __future__ import annotations

from app.broker.restart_policy import RestartPolicy, may_restart, recent_crashes
from tests.fakes import FakeClock


def test_three_crashes_are_restarted_and_the_fourth_within_a_minute_fails() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(clock=clock)
    decisions = []
    for _ in range(4):
        decisions.append(policy.record_crash())
        clock.now += 10
    assert decisions == [True, True, True, False]


def test_the_window_slides_so_old_crashes_stop_counting() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(clock=clock)
    for _ in range(3):
        assert policy.record_crash()
        clock.now += 25  # crashes at 0, 25, 50
    clock.now = 1000.0 + 61  # the first crash left the window
    assert policy.recent == 2
    assert policy.record_crash()
    clock.now += 1  # now at 62: crashes at 25, 50, 61 and this one are inside
    assert not policy.record_crash()


def test_crashes_far_apart_never_exhaust_the_budget() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(clock=clock)
    for _ in range(20):
        assert policy.record_crash()
        clock.now += 21  # at most 3 crashes in any 60 s


def test_reset_forgets_the_crashes() -> None:
    clock = FakeClock(1000.0)
    policy = RestartPolicy(clock=clock)
    for _ in range(4):
        policy.record_crash()
    policy.reset()
    assert policy.recent == 0
    assert policy.record_crash()


def test_pure_functions() -> None:
    assert recent_crashes([0.0, 30.0, 59.9, 60.0], now=60.0, window=60.0) == [30.0, 59.9, 60.0]
    assert may_restart([1.0, 2.0, 3.0], now=3.0)
    assert not may_restart([1.0, 2.0, 3.0, 4.0], now=4.0)
    assert may_restart([1.0, 2.0, 3.0, 4.0], now=61.5)
    assert may_restart([1.0, 2.0], now=2.0, limit=2, window=5.0)
    assert not may_restart([1.0, 2.0, 3.0], now=3.0, limit=2, window=5.0)
