"""Placement policies as pure functions: the reference's rule and PAIR's, with fake clocks."""

from __future__ import annotations

import pytest

from backend.protocol.proxy import GpuSample, ProxyTargets, RouteTarget
from backend.workers.proxy.routing.placement import pair, reference
from backend.workers.proxy.routing.placement.inputs import NEUTRAL_PRESSURE, Candidate, Pace
from backend.workers.proxy.routing.placement.placer import (
    SAMPLE_EVERY_S,
    Placer,
    resident,
    slots_for,
)
from tests.fakes import FakeClock

FAST, MID, SLOW = "fast", "mid", "slow"


def _cluster(**reserved: int) -> list[Candidate]:
    """4 slots at 60 tok/s, 2 at 30, 1 at 12, every model resident and measured."""
    shapes = {FAST: (4, 60.0), MID: (2, 30.0), SLOW: (1, 12.0)}
    return [
        Candidate(
            node=node,
            reserved=reserved.get(node, 0),
            slots=slots,
            resident=True,
            pace=Pace(tokens_per_s=speed, first_token_s=0.2),
        )
        for node, (slots, speed) in shapes.items()
    ]


def _burst(policy: str, candidates: list[Candidate], count: int) -> list[str]:
    """Place ``count`` requests one after the other, each taking a reservation."""
    held = {c.node: c.reserved for c in candidates}
    picks: list[str] = []
    for _ in range(count):
        now = [
            Candidate(
                node=c.node,
                pending=c.pending,
                reserved=held[c.node],
                slots=c.slots,
                resident=c.resident,
                gpu_pressure=c.gpu_pressure,
                pace=c.pace,
            )
            for c in candidates
        ]
        node = reference.pick(now) if policy == "reference" else pair.pick(now, 250.0)
        held[node] += 1
        picks.append(node)
    return picks


# The reference's rule.


def test_pressure_bands_rise_at_40_70_85_and_fall_with_hysteresis() -> None:
    assert [reference.band(p) for p in (0, 39.9, 40, 69.9, 70, 84.9, 85, 100)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    assert reference.band(82, previous=3) == 3, "above 80 keeps band 3 on the way down"
    assert reference.band(79, previous=3) == 2
    assert reference.band(36, previous=1) == 1
    assert reference.band(34, previous=1) == 0
    assert reference.band(90, previous=0) == 3, "rising is never held back"


def test_pressure_is_smoothed_and_a_stale_sample_is_neutral() -> None:
    book = reference.PressureBook()
    book.observe("a", GpuSample(percent=100, sampled_at=100.0), now=100.5)
    assert book.pressure("a", now=101.0) == 3, "the first sample starts the average"
    book.observe("a", GpuSample(percent=0, sampled_at=102.0), now=102.0)
    # 0.35 * 0 + 0.65 * 100 = 65: under 80, so down from 3 to 2 (not to the raw 0).
    assert book.pressure("a", now=102.0) == 2
    book.observe("a", GpuSample(percent=0, sampled_at=102.0), now=103.0)
    assert book.pressure("a", now=103.0) == 2, "the same sample is taken once"
    assert book.pressure("a", now=112.5) == NEUTRAL_PRESSURE, "older than 10 s: neutral"
    book.observe("a", GpuSample(percent=10, sampled_at=120.0), now=120.0)
    assert book.pressure("a", now=120.0) == 0, "after a gap the average starts again"
    book.observe("b", GpuSample(percent=99, sampled_at=80.0), now=120.0)
    assert book.pressure("b", now=120.0) == NEUTRAL_PRESSURE, "a sample already stale is ignored"
    assert book.pressure("unknown", now=120.0) == NEUTRAL_PRESSURE


def test_reference_ranks_by_pending_plus_pressure_plus_reservations() -> None:
    candidates = [
        Candidate(node="my-pc", pending=3, gpu_pressure=3),
        Candidate(node="lab-desk", pending=0, gpu_pressure=0),
        Candidate(node="gpu-rig", pending=1, gpu_pressure=1),
    ]
    assert [reference.score(c) for c in candidates] == [6, 0, 2]  # the reference's example
    assert reference.pick(candidates) == "lab-desk"
    assert reference.pick([Candidate(node="x", reserved=2), Candidate(node="y", pending=1)]) == "y"


def test_reference_ties_go_by_its_schedulers_order_then_the_candidates() -> None:
    reserved = Candidate(node="a", reserved=1, gpu_pressure=1)
    pending = Candidate(node="b", pending=1, gpu_pressure=1)
    assert reference.pick([pending, reserved]) == "a", "the snapshot's pending + pressure first"
    hot = Candidate(node="a", pending=0, gpu_pressure=2)
    busy = Candidate(node="b", pending=1, gpu_pressure=1)
    assert reference.pick([hot, busy]) == "b", "then the lower pressure"


def test_reference_ties_keep_the_candidates_order_and_ignore_speed() -> None:
    slow_first = [
        Candidate(node="b", pace=Pace(tokens_per_s=5.0)),
        Candidate(node="a", pace=Pace(tokens_per_s=500.0)),
    ]
    assert reference.pick(slow_first) == "b"


def test_reference_spreads_a_burst_evenly_whatever_the_slots() -> None:
    assert _burst("reference", _cluster(), 6) == [FAST, MID, SLOW, FAST, MID, SLOW]


def test_a_node_that_left_is_no_candidate_and_its_pressure_is_forgotten() -> None:
    book = reference.PressureBook()
    book.observe("gone", GpuSample(percent=0, sampled_at=10.0), now=10.0)
    book.keep_only({"other"})
    assert book.pressure("gone", now=10.0) == NEUTRAL_PRESSURE
    remaining = [c for c in _cluster() if c.node != FAST]
    assert reference.pick(remaining) == MID
    assert pair.pick(remaining) == MID
    with pytest.raises(ValueError, match="no candidate"):
        pair.pick([])
    with pytest.raises(ValueError, match="no candidate"):
        reference.pick([])


# PAIR's rule.


def test_a_burst_fills_the_fast_nodes_free_slots_first_then_the_next_fastest() -> None:
    picks = _burst("pair", _cluster(), 8)
    assert picks[:4] == [FAST] * 4, "the fast node's four free slots first"
    # With the fast node full a fifth waits ~4.4 s there; the mid node finishes in ~8.5 s,
    # so queueing on the fast node still wins until its queue is long.
    assert picks[4] == FAST
    assert SLOW not in picks[:6]


def test_the_slow_node_is_used_only_when_the_others_are_crowded() -> None:
    crowded = _cluster(fast=20, mid=4)  # ~23 s there and ~21 s on the mid node
    assert pair.pick(crowded, 250.0) == SLOW
    assert pair.pick(_cluster(fast=3), 250.0) == FAST


def test_expected_completion_adds_wait_load_and_service() -> None:
    node = Candidate(
        node="a",
        pending=2,
        reserved=1,
        slots=2,
        resident=False,
        pace=Pace(tokens_per_s=50.0, first_token_s=1.0, load_s=4.0),
    )
    got = pair.estimate(node, answer_tokens=100.0, optimistic_tokens_per_s=50.0)
    assert got.service_s == pytest.approx(3.0)  # 1 s to the first token + 100 / 50
    assert got.wait_s == pytest.approx(3.0)  # 3 ahead, 2 slots: 2 jobs to finish, 2 at a time
    assert got.load_s == pytest.approx(4.0)
    assert got.total_s == pytest.approx(10.0)


def test_a_cold_node_pays_its_load_time_and_an_unknown_one_pays_nothing() -> None:
    warm = Candidate(node="warm", resident=True, pace=Pace(tokens_per_s=30.0))
    cold = Candidate(node="cold", resident=False, pace=Pace(tokens_per_s=60.0, load_s=20.0))
    assert pair.pick([cold, warm], 250.0) == "warm", "20 s of loading outweighs 4 s saved"
    quick_load = Candidate(node="cold", resident=False, pace=Pace(tokens_per_s=60.0, load_s=1.0))
    assert pair.pick([warm, quick_load], 250.0) == "cold"
    default = Candidate(node="cold", resident=False, pace=Pace(tokens_per_s=60.0))
    assert pair.estimate(default, answer_tokens=1, optimistic_tokens_per_s=60).load_s == (
        pair.DEFAULT_LOAD_S
    )
    unknown = Candidate(node="unknown", resident=None, pace=Pace(tokens_per_s=60.0))
    assert pair.estimate(unknown, answer_tokens=1, optimistic_tokens_per_s=60).load_s == 0.0


def test_a_cold_node_never_measured_is_tried_before_warm_slower_ones_fill_up() -> None:
    warm = Candidate(node="warm", slots=2, resident=True, pace=Pace(tokens_per_s=30.0))
    cold = Candidate(node="cold", slots=4, resident=False, pace=Pace())
    assert pair.estimate(cold, answer_tokens=1, optimistic_tokens_per_s=30).load_s == 0.0
    assert pair.pick([warm, cold], 250.0) == "cold", "as fast as the best, no load charged"
    measured = Candidate(node="cold", slots=4, resident=False, pace=Pace(tokens_per_s=60.0))
    assert pair.pick([warm, measured], 250.0) == "warm", "once measured its load counts"


def test_a_node_of_unknown_speed_is_tried_not_starved() -> None:
    measured = Candidate(node="a", pace=Pace(tokens_per_s=40.0))
    newcomer = Candidate(node="z", pace=Pace())
    assert pair.pick([measured, newcomer], 250.0) == "z", "as fast as the best, and wins the tie"
    busy_newcomer = Candidate(node="z", reserved=1, pace=Pace())
    assert pair.pick([measured, busy_newcomer], 250.0) == "a", "but not over a free slot"
    nothing_known = [Candidate(node="b"), Candidate(node="a")]
    assert pair.pick(nothing_known) == "b", "no data anywhere: the candidates' order"


def test_an_old_slow_measurement_decays_toward_the_best_speed() -> None:
    fresh = Pace(tokens_per_s=10.0, age_s=0.0)
    old = Pace(tokens_per_s=10.0, age_s=pair.SPEED_HALF_LIFE_S)
    assert pair.speed(fresh, 50.0) == pytest.approx(10.0)
    assert pair.speed(old, 50.0) == pytest.approx(30.0)
    assert pair.speed(Pace(tokens_per_s=80.0, age_s=1e9), 50.0) == 80.0


def test_ties_keep_the_candidates_order() -> None:
    same = Pace(tokens_per_s=30.0)
    assert pair.pick([Candidate(node="b", pace=same), Candidate(node="a", pace=same)]) == "b"


def test_affinity_wins_a_near_tie_but_not_a_free_fast_slot() -> None:
    near = [
        Candidate(node="a", pace=Pace(tokens_per_s=31.0, first_token_s=0.5)),
        Candidate(node="b", pace=Pace(tokens_per_s=30.0, first_token_s=0.5), affinity=True),
    ]
    assert pair.pick(near, 250.0) == "b"
    far = [
        Candidate(node=FAST, pace=Pace(tokens_per_s=60.0, first_token_s=0.5)),
        Candidate(node=SLOW, pace=Pace(tokens_per_s=12.0, first_token_s=0.5), affinity=True),
    ]
    assert pair.pick(far, 250.0) == FAST, "a chat is not held on a slow node"


def test_reservations_spread_a_burst_over_equal_nodes() -> None:
    equal = [
        Candidate(node="a", resident=True, pace=Pace(tokens_per_s=30.0)),
        Candidate(node="b", resident=True, pace=Pace(tokens_per_s=30.0)),
    ]
    assert _burst("pair", equal, 4) == ["a", "b", "a", "b"]


# What the placer gathers from the table.


def _target(node: str, **fields: object) -> RouteTarget:
    return RouteTarget(node_id=node, kind="peer", base_url="https://x", models=["m"], **fields)  # type: ignore[arg-type]


def test_slots_and_residency_come_from_the_table_entry() -> None:
    target = _target(
        "a", slots=2, model_slots={"big:latest": 1}, resident=["m"], resident_known=True
    )
    assert slots_for(target, "ollama", "big") == 1
    assert slots_for(target, "ollama", "m") == 2
    assert resident(target, "ollama", "m:latest") is True
    assert resident(target, "ollama", "big") is False
    assert resident(_target("b"), "ollama", "m") is None, "a node that did not say"


def test_round_robin_takes_owners_in_turn_by_node_id() -> None:
    placer = Placer(FakeClock())
    candidates = [Candidate(node="b"), Candidate(node="a"), Candidate(node="c")]
    picks = [candidates[placer.choose("round_robin", candidates, "m")].node for _ in range(4)]
    assert picks == ["a", "b", "c", "a"]


def test_the_placer_feeds_gpu_samples_and_reservations_into_the_reference() -> None:
    clock = FakeClock(start=1_000.0)
    placer = Placer(clock)
    targets = ProxyTargets(
        engines={"ollama": [_target("a"), _target("b")]},
        gpu={
            "a": GpuSample(percent=95, sampled_at=999.0),
            "b": GpuSample(percent=5, sampled_at=999.0),
        },
    )
    placer.table_changed(targets)
    found = targets.engines["ollama"]
    candidates = placer.candidates("ollama", "m", found, loads=lambda node: (0, 0))
    assert [c.gpu_pressure for c in candidates] == [3, 0]
    assert candidates[placer.choose("reference", candidates, "m")].node == "b"
    loaded = placer.candidates("ollama", "m", found, loads=lambda n: (0, 4) if n == "b" else (0, 0))
    assert candidates[placer.choose("reference", loaded, "m")].node == "a"
    clock.now += 30
    stale = placer.candidates("ollama", "m", found, loads=lambda node: (0, 0))
    assert [c.gpu_pressure for c in stale] == [NEUTRAL_PRESSURE, NEUTRAL_PRESSURE]


def test_the_placer_learns_speed_first_token_and_load_from_dispatches() -> None:
    clock = FakeClock(start=0.0)
    placer = Placer(clock)
    cold = placer.placed(Candidate(node="a", slots=1, resident=False), "ollama", "m")
    clock.now += 3.0
    placer.first_byte(cold)
    warm = placer.placed(Candidate(node="a", slots=1, resident=True), "ollama", "m")
    clock.now += 0.5
    placer.first_byte(warm)
    queued = placer.placed(Candidate(node="a", slots=1, reserved=1, resident=True), "ollama", "m")
    clock.now += 9.0
    placer.first_byte(queued)  # it waited for a slot: says nothing of the first token
    pace = placer.speeds.pace("a", "m:latest", clock.now)
    assert pace.load_s == pytest.approx(3.0)
    assert pace.first_token_s == pytest.approx(0.5)
    assert pace.tokens_per_s is None


def test_one_dispatch_per_node_and_model_is_sampled_per_interval() -> None:
    clock = FakeClock(start=0.0)
    placer = Placer(clock)
    assert placer.sampling("a", "m:latest")
    assert not placer.sampling("a", "m:latest"), "a burst taught by every request"
    assert placer.sampling("b", "m:latest") and placer.sampling("a", "n:latest")
    clock.now += SAMPLE_EVERY_S * 0.9
    assert not placer.sampling("a", "m:latest")
    clock.now += SAMPLE_EVERY_S * 0.2
    assert placer.sampling("a", "m:latest")
    # A new table (one comes with every change of load) does not restart the sampling.
    placer.table_changed(ProxyTargets(engines={"ollama": [_target("a")]}))
    assert not placer.sampling("a", "m:latest")
