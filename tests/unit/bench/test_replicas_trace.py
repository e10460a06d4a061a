"""The replica benchmark's trace (``bench/_replicas_trace.py``): the step as it always was, seed
for seed, and the ramp's burst only in its window and rising over its ramp.

The bench scripts import their helpers by bare name (``bench/`` first on ``sys.path``), so the
folder is put on the path here the same way.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from _replicas_trace import HOT, QUICK, QUICK_RAMP, SHAPES, TraceShape, draw_trace  # noqa: E402


def burst_times(shape: TraceShape, seed: int) -> list[float]:
    return [arrival.at for arrival in draw_trace(shape, seed) if arrival.burst]


def test_the_step_draws_the_same_trace_as_before_the_ramp() -> None:
    trace = draw_trace(QUICK, 38)
    burst = [arrival for arrival in trace if arrival.burst]
    assert (len(trace), len(burst)) == (83, 44)
    assert [round(arrival.at, 4) for arrival in burst[:3]] == [10.2701, 10.5631, 11.1443]
    assert [(round(a.at, 4), a.model, a.tokens) for a in trace[:2]] == [
        (1.9427, "notes:latest", 21),
        (3.4006, "chat:latest", 18),
    ]
    full = draw_trace(SHAPES["step"][0], 38)
    assert (len(full), sum(arrival.burst for arrival in full)) == (145, 70)


def test_the_ramp_draws_its_burst_only_within_the_burst_window() -> None:
    for seed in range(20):
        times = burst_times(QUICK_RAMP, seed)
        assert times
        end = QUICK_RAMP.burst_start_s + QUICK_RAMP.burst_s
        assert all(QUICK_RAMP.burst_start_s <= at < end for at in times)


def test_the_ramp_rises_from_few_arrivals_to_many() -> None:
    shape = TraceShape(burst_start_s=10.0, burst_s=400.0, duration_s=420.0, ramp_s=300.0)
    times = burst_times(shape, 38)
    first = sum(1 for at in times if at < 110.0)
    last = sum(1 for at in times if 210.0 <= at < 310.0)
    # Expected 2/s x 100 s x 1/6 = 33 and x 5/6 = 167.
    assert 15 < first < 60
    assert 120 < last < 220
    held = sum(1 for at in times if at >= 310.0)
    assert 150 < held < 250  # 2/s for the last 100 s


def test_the_ramp_thins_the_steps_burst_and_keeps_the_rest() -> None:
    step = draw_trace(QUICK, 7)
    ramp = draw_trace(replace(QUICK, ramp_s=15.0), 7)
    assert [a for a in ramp if not a.burst] == [a for a in step if not a.burst]
    assert all(a.model == HOT for a in ramp if a.burst)
    kept = {a.at for a in ramp if a.burst}
    assert kept < {a.at for a in step if a.burst}
    # Past the ramp every candidate is kept.
    assert {at for at in kept if at >= 25.0} == {a.at for a in step if a.burst and a.at >= 25.0}
