"""When the adaptive CPU policy switches: batch once enough requests are in flight and the last
switch is far enough back, normal again (at once) once few are, and never with a fixed setting.
Driven by a scripted clock and a setter that records what it was asked."""

from __future__ import annotations

import logging

import pytest

from backend.workers.cpu_policy import (
    POLICY_ENV,
    Governor,
    Policy,
    Setting,
    Thresholds,
    next_policy,
    wanted,
)

AT = Thresholds(batch_at=16, normal_at=4, every_s=1.0)


class Scripted:
    """The governor's clock and setter: time moves only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0
        self.set: list[Policy] = []

    def governor(self, setting: Setting = "adaptive") -> Governor:
        return Governor(
            setting, monotonic=lambda: self.now, set_policy=self.set.append, thresholds=AT
        )


def to(governor: Governor, count: int) -> None:
    """Start or end requests until ``count`` are in flight."""
    while governor.in_flight < count:
        governor.started()
    while governor.in_flight > count:
        governor.ended()


@pytest.mark.parametrize(
    ("current", "in_flight", "since_s", "expected"),
    [
        ("normal", 15, 60.0, "normal"),  # under the batch threshold
        ("normal", 16, 60.0, "batch"),
        ("normal", 100, 0.99, "normal"),  # too soon after the last switch
        ("normal", 16, 1.0, "batch"),
        ("batch", 5, 0.0, "batch"),  # between the thresholds: it stays
        ("batch", 4, 0.0, "normal"),  # down at once, however soon
        ("batch", 0, 60.0, "normal"),
    ],
)
def test_next_policy(current: Policy, in_flight: int, since_s: float, expected: Policy) -> None:
    assert next_policy(current, in_flight, since_s, AT) == expected


def test_it_is_normal_and_sets_nothing_at_rest() -> None:
    script = Scripted()
    governor = script.governor()
    to(governor, 15)
    to(governor, 0)
    assert governor.policy == "normal"
    assert script.set == []


def test_many_in_flight_make_it_batch_once_and_few_make_it_normal_again() -> None:
    script = Scripted()
    governor = script.governor()
    to(governor, 16)
    assert (governor.policy, script.set) == ("batch", ["batch"])
    to(governor, 100)
    to(governor, 5)  # between the thresholds: no switch either way
    to(governor, 20)
    assert script.set == ["batch"]
    to(governor, 4)
    assert (governor.policy, script.set) == ("normal", ["batch", "normal"])
    to(governor, 0)
    assert script.set == ["batch", "normal"]


def test_a_second_switch_to_batch_waits_out_the_interval() -> None:
    script = Scripted()
    governor = script.governor()
    to(governor, 16)
    to(governor, 4)  # back to normal at once
    script.now += 0.5
    to(governor, 30)
    assert (governor.policy, script.set) == ("normal", ["batch", "normal"])
    script.now += 0.5  # a second after the last switch: the next request switches
    assert script.set == ["batch", "normal"]
    governor.started()
    assert (governor.policy, script.set) == ("batch", ["batch", "normal", "batch"])


def test_the_first_switch_does_not_wait() -> None:
    script = Scripted()
    script.now = 0.0  # a clock that starts at zero, as a fresh machine's may
    governor = script.governor()
    to(governor, 16)
    assert script.set == ["batch"]


@pytest.mark.parametrize("setting", ["batch", "normal"])
def test_a_fixed_setting_only_counts(setting: Policy) -> None:
    script = Scripted()
    governor = script.governor(setting)
    to(governor, 200)
    assert governor.in_flight == 200
    to(governor, 0)
    assert (governor.policy, script.set) == (setting, [])


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "adaptive"), ("", "adaptive"), (" Batch ", "batch"), ("normal", "normal")],
)
def test_the_setting_comes_from_the_environment(value: str | None, expected: Setting) -> None:
    environ = {} if value is None else {POLICY_ENV: value}
    assert wanted(environ) == expected


def test_a_setting_it_does_not_know_is_named_and_adaptive_is_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert wanted({POLICY_ENV: "fifo"}) == "adaptive"
    assert "PAIR_CPU_POLICY='fifo' is none of adaptive, batch, normal" in caplog.text
