"""How the kernel schedules a hot worker: as a batch task on Linux, so that it does not preempt
the engine each time a token arrives.

The proxy worker sleeps between chunks and is woken by each one the engine writes. Under the
normal policy a woken task that has slept a lot preempts the task running on that core, which
on a machine where the engine and the clients share the cores is often the engine itself, in
the middle of writing the next tokens: the two ping-pong, one chunk per wake-up. With the
Ollama emulator at 100 concurrent streams on two cores (``bench/worker_variants.py``, which
counts context switches), the worker was woken 1.96 times per stream and the emulator
preempted 1.69 times. A batch task is not allowed to preempt when it wakes (it still gets its
full share of the CPU, at the same weight), so the worker runs when a core frees up and finds
several chunks waiting: 0.21 wake-ups and 0.05 preemptions per stream, 0.195 ms of worker CPU
per stream instead of 0.228, and more streams per second. When a core is idle the worker is
placed on it at once, so a lone stream's chunks are not held back.

``PAIR_CPU_POLICY=normal`` keeps the normal policy (to compare: ``bench/worker_variants.py``);
other systems have no such policy and are left as they are.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Literal

POLICY_ENV = "PAIR_CPU_POLICY"
Policy = Literal["batch", "normal"]

log = logging.getLogger(__name__)


def wanted() -> Policy:
    """``batch`` unless the environment says ``normal`` (anything else: a warning, ``batch``)."""
    value = os.environ.get(POLICY_ENV, "").strip().lower()
    if value in ("", "batch"):
        return "batch"
    if value == "normal":
        return "normal"
    log.warning("%s=%r is neither batch nor normal; using batch", POLICY_ENV, value)
    return "batch"


def apply() -> Policy | None:
    """Give every thread of this process the ``wanted()`` policy (threads started later inherit
    it); the policy now in force, or None where the system has none of these (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    policy = wanted()
    number = os.SCHED_BATCH if policy == "batch" else os.SCHED_OTHER
    for thread in _threads():
        try:
            os.sched_setscheduler(thread, number, os.sched_param(0))
        except (PermissionError, ProcessLookupError) as exc:  # a thread that has just ended
            log.debug("thread %d keeps its policy: %s", thread, exc)
    return policy


def _threads() -> list[int]:
    """This process's thread ids (``/proc/self/task``), or this thread alone without it."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return [0]
