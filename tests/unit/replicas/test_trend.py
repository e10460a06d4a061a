"""The rising-wait trigger (``trend.py``) and how the planner uses it: a wait building up
toward the target loads a replica a load's time before it would get there, while a flat or
falling wait, a short one, or too little evidence does not."""

from __future__ import annotations

from backend.components.replicas.plan import Load, ModelView, Policy, plan
from backend.components.replicas.trend import rises_past, rising_wait
from tests.unit.replicas.test_plan import NOW, _loads, _view, _waits

POLICY = Policy(target_wait_s=3.0, panic_window_s=6.0, lead_s=10.0)


def test_a_steady_rise_is_projected_a_load_ahead() -> None:
    # Half a second more wait every second: 1.5 s now, 6.5 s in 10 s.
    samples = _waits([(4, 0.0), (3, 0.5), (2, 1.0), (1, 1.5)])
    rising = rising_wait(samples, NOW - 6, lead_s=10.0)

    assert rising is not None
    assert rising.requests == 4
    assert abs(rising.slope - 0.5) < 1e-9
    assert rising.latest_s == 1.5
    assert abs(rising.projected_s - 6.5) < 1e-9
    assert rises_past(rising, target_s=3.0, floor=0.5, min_requests=2)


def test_flat_falling_or_too_short_a_trend_is_not_rising() -> None:
    assert rising_wait(_waits([(4, 2.0), (2, 2.0), (1, 2.0)]), NOW - 6, 10.0) is None
    assert rising_wait(_waits([(4, 3.0), (2, 2.0), (1, 1.0)]), NOW - 6, 10.0) is None
    assert rising_wait(_waits([(1.5, 0.0), (1.0, 2.0)]), NOW - 6, 10.0) is None  # 0.5 s apart
    assert rising_wait(_waits([(1, 2.0)]), NOW - 6, 10.0) is None
    assert rising_wait(_waits([(9, 0.0), (8, 2.0)]), NOW - 6, 10.0) is None  # out of window


def test_a_rise_still_far_under_the_target_waits() -> None:
    # Rising fast, but the latest wait (1 s) is under half the 3 s target: not yet.
    rising = rising_wait(_waits([(3, 0.0), (1, 1.0)]), NOW - 6, lead_s=10.0)
    assert rising is not None and rising.projected_s > 3.0
    assert not rises_past(rising, target_s=3.0, floor=0.5, min_requests=2)
    # One request is not evidence.
    single = rising_wait(
        _waits([(3, 0.0), (1, 2.0)], requests=1)[1:] + _waits([(2, 0.0)]), NOW - 6, 10.0
    )
    assert single is not None
    assert not rises_past(single, target_s=3.0, floor=0.5, min_requests=3)


def test_the_planner_loads_on_a_rising_wait_before_either_window_trips() -> None:
    # Waits of 0 to 2 s: the panic mean (1 s) is far under 6 s, the stable one under 3 s.
    rise = _waits([(5, 0.0), (4, 0.5), (3, 1.0), (2, 1.5), (1, 2.0)])
    (load,) = plan((_view(*rise),), (), POLICY, NOW)

    assert isinstance(load, Load) and load.node_name == "laptop"
    assert load.reason == (
        "qwen2.5:7b waits 2 s and rising: 7 s within 10 s (target 3 s) on gpu-box; "
        "loading it on laptop"
    )


def test_the_planner_leaves_a_steady_short_wait_alone() -> None:
    steady = _waits([(5, 2.0), (4, 2.0), (3, 2.0), (2, 2.0), (1, 2.0)])
    assert _loads(plan((_view(*steady),), (), POLICY, NOW)) == []


def test_a_rise_from_before_the_serving_set_changed_is_not_counted() -> None:
    rise = _waits([(5, 0.0), (4, 0.5), (3, 1.0), (2, 1.5), (1, 2.0)])
    view = _view(*rise, changed_at=NOW - 1.5)
    assert isinstance(view, ModelView)
    assert _loads(plan((view,), (), POLICY, NOW)) == []
