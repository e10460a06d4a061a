"""The hot worker's cycle collector: start-up frozen, the young generation walked rarely,
cycles still freed. Each case runs in a child interpreter so this process's collector is left
as it was."""

from __future__ import annotations

import functools
import textwrap

import pytest

from backend.workers import collector
from tests.support.child import run_python

# Holds 10,000 containers alive (requests in flight), then makes cyclic garbage, and prints
# the youngest generation's collections after each step, the frozen count, and whether the
# cycles were freed.
PROBE = textwrap.dedent(
    """
    import gc, sys, weakref
    from backend.workers import collector
    if sys.argv[1] == "settled":
        collector.settle()
    frozen = gc.get_freeze_count()
    start = gc.get_stats()[0]["collections"]
    in_flight = [[index] for index in range(10_000)]
    held = gc.get_stats()[0]["collections"] - start
    class Node:
        pass
    def cycle():
        node = Node()
        node.me = node
        return node
    probe = weakref.ref(cycle())
    for _ in range(collector.GEN0_THRESHOLD + 1_000):
        cycle()
    print(frozen, held, gc.get_stats()[0]["collections"] - start, probe() is None)
    """
)


def run_child(script: str, argument: str) -> str:
    """``script``'s output in a child interpreter, without this environment's threshold."""
    return run_python(script, argument, without=(collector.GEN0_ENV,)).stdout


@functools.cache  # each mode's probe once per session: its figures answer several tests
def probe(mode: str) -> tuple[int, int, int, bool]:
    frozen, held, total, freed = run_child(PROBE, mode).split()
    return int(frozen), int(held), int(total), freed == "True"


def test_objects_in_flight_are_not_walked_per_700_allocations() -> None:
    frozen, held, _, _ = probe("settled")
    assert held == 0
    assert frozen > 1_000  # the modules imported so far: never walked again
    _, held_by_default, _, _ = probe("default")
    assert held_by_default >= 10  # CPython's 700: the probe itself is sound


def test_cycles_are_still_collected() -> None:
    _, _, collections, freed = probe("settled")
    assert collections >= 1
    assert freed


def test_the_environment_may_set_another_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(collector.GEN0_ENV, " 700 ")
    assert collector.gen0_threshold() == 700


@pytest.mark.parametrize("value", ["", "0", "-5", "many", "1e4"])
def test_a_threshold_that_is_not_a_positive_integer_is_ignored(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(collector.GEN0_ENV, value)
    assert collector.gen0_threshold() == collector.GEN0_THRESHOLD


# A cycle made garbage with no allocations after it: only a sweep can free it in time.
SWEPT = textwrap.dedent(
    """
    import asyncio, gc, sys, weakref
    from backend.workers import collector
    collector.settle()
    class Node:
        pass
    async def main():
        node = Node()
        node.me = node
        probe = weakref.ref(node)
        del node
        sweeping = asyncio.create_task(collector.sweep(float(sys.argv[1])))
        await asyncio.sleep(0.3)
        sweeping.cancel()
        print(probe() is None)
    asyncio.run(main())
    """
)


@pytest.mark.parametrize(("interval", "freed"), [(0.05, "True"), (30.0, "False")])
def test_a_quiet_workers_garbage_is_swept_within_the_interval(interval: float, freed: str) -> None:
    assert run_child(SWEPT, str(interval)).strip() == freed


# Sweeps timed by the collector's own callback: at rest, then with the young generation full.
BACKOFF = textwrap.dedent(
    """
    import asyncio, gc, time
    from backend.workers import collector
    collector.settle()
    sweeps = []
    def noted(phase, info):
        if phase == "start":
            sweeps.append(time.monotonic())
    gc.callbacks.append(noted)
    async def main():
        sweeping = asyncio.create_task(collector.sweep(0.01, 0.32))
        await asyncio.sleep(1.5)
        at_rest = list(sweeps)
        busy = [[n] for n in range(5 * collector.IDLE_COUNT)]  # young, and kept
        await asyncio.sleep(0.8)  # the next sweep finds them: back to 0.01 s
        sweeping.cancel()
        after = [t for t in sweeps if t > at_rest[-1]]
        print(len(at_rest), at_rest[-1] - at_rest[-2], after[1] - after[0], len(busy))
    asyncio.run(main())
    """
)


def test_an_idle_workers_sweeps_back_off_and_return_with_work() -> None:
    count, last_gap, gap_after = run_child(BACKOFF, "").split()[:3]
    # 0.01 + 0.02 + 0.04 + 0.08 + 0.16 + 0.32...: some 8 sweeps in 1.5 s, not 150, the last
    # ones 0.32 s apart.
    assert 4 <= int(count) <= 20, count
    assert float(last_gap) >= 0.3, last_gap
    # The first sweep after the young generation filled sees it; the next comes 0.01 s later
    # (0.32 s if the pace did not start again).
    assert float(gap_after) < 0.2, gap_after
