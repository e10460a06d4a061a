"""The hot worker's CPU policy: a batch task on Linux (it does not preempt the engine on each
token), every thread of it, unless the environment asks for the normal policy. Each case runs
in a child interpreter so that this process keeps its own policy."""

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


def probe(value: str | None) -> tuple[list[str], str]:
    """What the probe printed with ``PAIR_CPU_POLICY`` at ``value`` (None: unset), and its
    warnings."""
    extra = {} if value is None else {cpu_policy.POLICY_ENV: value}
    done = run_python(PROBE, without=(cpu_policy.POLICY_ENV,), extra=extra)
    return done.stdout.split(), done.stderr


def test_every_thread_is_a_batch_task_by_default() -> None:
    (applied, *policies), warnings = probe(None)
    assert applied == "batch"
    assert policies == [str(os.SCHED_BATCH)] * 3  # the main thread, one before, one after
    assert warnings == ""


def test_the_environment_keeps_the_normal_policy() -> None:
    (applied, *policies), _ = probe(" Normal ")
    assert applied == "normal"
    assert policies == [str(os.SCHED_OTHER)] * 3


def test_a_value_it_does_not_know_is_named_and_batch_is_used() -> None:
    (applied, *policies), warnings = probe("fifo")
    assert applied == "batch"
    assert policies == [str(os.SCHED_BATCH)] * 3
    assert "PAIR_CPU_POLICY='fifo' is neither batch nor normal" in warnings
