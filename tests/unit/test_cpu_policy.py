"""The hot worker's CPU policy as the kernel sees it: every thread of the process, those started
before the policy is set and after, normal at rest by default, batch or normal where the
environment fixes it, and batch only while many requests are in flight. Each case runs in a
child interpreter so that this process keeps its own policy."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from backend.workers import cpu_policy
from tests.support.child import run_python

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the batch policy is Linux's"
)

# A thread started before apply() and one after; prints what apply() returned and each
# thread's policy number as the kernel reports it.
PROBE = textwrap.dedent(
    """
    import logging, os, threading
    from backend.workers import cpu_policy
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ids, go = [], threading.Event()
    def hold():
        ids.append(threading.get_native_id())
        go.wait()
    early = threading.Thread(target=hold)
    early.start()
    while not ids:
        pass
    applied = cpu_policy.apply()
    late = threading.Thread(target=hold)
    late.start()
    while len(ids) < 2:
        pass
    policies = [os.sched_getscheduler(t) for t in (0, *ids)]
    go.set()
    early.join()
    late.join()
    print(applied, *policies)
    """
)

# The adaptive governor on the real clock and the real setter, with low thresholds: a thread
# started at rest, then the count taken over the batch threshold (a thread started then), down
# to the normal one (a thread started then). After each step it prints every thread's policy
# as /proc says it (field 41 of /proc/self/task/<id>/stat), the main thread first.
CROSSING = textwrap.dedent(
    """
    import os, threading
    from backend.workers import cpu_policy
    go, threads = threading.Event(), []
    def start_thread():
        ready = threading.Event()
        thread = threading.Thread(target=lambda: (ready.set(), go.wait()))
        thread.start()
        ready.wait()
        threads.append(thread)
    def kernel_policies():
        main = os.getpid()
        tasks = sorted(int(t) for t in os.listdir("/proc/self/task"))
        tasks.sort(key=lambda t: t != main)
        return [open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[38]
                for t in tasks]
    cpu_policy.apply()
    at = cpu_policy.Thresholds(batch_at=3, normal_at=1, every_s=0.0)
    governor = cpu_policy.Governor("adaptive", monotonic=lambda: 0.0, thresholds=at)
    start_thread()
    print("rest", *kernel_policies())
    for _ in range(3):
        governor.started()
    start_thread()
    print("busy", *kernel_policies())
    governor.ended()
    print("easing", *kernel_policies())
    governor.ended()
    start_thread()
    print("quiet", *kernel_policies())
    go.set()
    for thread in threads:
        thread.join()
    """
)


def probe(value: str | None) -> tuple[list[str], str]:
    """What the probe printed with ``PAIR_CPU_POLICY`` at ``value`` (None: unset), and its
    warnings."""
    extra = {} if value is None else {cpu_policy.POLICY_ENV: value}
    done = run_python(PROBE, without=(cpu_policy.POLICY_ENV,), extra=extra)
    return done.stdout.split(), done.stderr


def test_every_thread_is_a_normal_task_at_rest_by_default() -> None:
    (applied, *policies), warnings = probe(None)
    assert applied == "normal"
    assert policies == [str(os.SCHED_OTHER)] * 3  # the main thread, one before, one after
    assert warnings == ""


def test_the_environment_fixes_the_batch_policy() -> None:
    (applied, *policies), _ = probe(" Batch ")
    assert applied == "batch"
    assert policies == [str(os.SCHED_BATCH)] * 3


def test_the_environment_fixes_the_normal_policy() -> None:
    (applied, *policies), _ = probe(" Normal ")
    assert applied == "normal"
    assert policies == [str(os.SCHED_OTHER)] * 3


def test_a_value_it_does_not_know_is_named_and_adaptive_is_used() -> None:
    (applied, *policies), warnings = probe("fifo")
    assert applied == "normal"
    assert policies == [str(os.SCHED_OTHER)] * 3
    assert "PAIR_CPU_POLICY='fifo' is none of adaptive, batch, normal" in warnings


def test_every_thread_follows_the_requests_in_flight() -> None:
    done = run_python(CROSSING, without=(cpu_policy.POLICY_ENV,))
    lines = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    normal, batch = str(os.SCHED_OTHER), str(os.SCHED_BATCH)
    assert lines["rest"] == [normal] * 2  # the main thread and one started at rest
    assert lines["busy"] == [batch] * 3  # and one started while batch
    assert lines["easing"] == [batch] * 3  # 2 in flight: above the normal threshold
    assert lines["quiet"] == [normal] * 4  # and one started since
