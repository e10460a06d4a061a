"""How the kernel schedules the hot worker on Linux: as a normal task while it carries a few
requests, as a batch task while it carries many at once.

The proxy worker sleeps between chunks and is woken by each one the engine writes. Under the
normal policy a woken task that has slept a lot preempts the task running on that core, which
on a machine where the engine and the clients share the cores is often the engine itself, in
the middle of writing the next tokens: the two ping-pong, one chunk per wake-up. With the
Ollama emulator at 100 concurrent streams on two cores (``bench/worker_variants.py``, which
counts context switches), the worker was woken 1.96 times per stream and the emulator
preempted 1.69 times. A batch task is not allowed to preempt when it wakes (it still gets its
full share of the CPU, at the same weight), so the worker runs when a core frees up and finds
several chunks waiting: 0.21 wake-ups and 0.05 preemptions per stream, 0.195 ms of worker CPU
per stream instead of 0.228, and more streams per second.

The same rule makes a lone request wait behind whatever else runs: on a desktop busy with
other programs a batch worker is not placed on a core until one of them yields it, and one
request at a time with two busy background processes took 2.68 ms longer (p50) through a
batch worker against 0.53 ms through a normal one (``bench/README.md``). So by default
(``adaptive``) the worker is a normal task, becomes a batch task once ``BATCH_AT`` requests are
in flight, and a normal one again once they are down to ``NORMAL_AT``: the gap keeps a load
hovering at one threshold from switching back and forth, and a switch to batch comes at most
once every ``EVERY_S`` (each switch is a system call per thread). Going back to normal is never
delayed, so a request that comes after a burst does not wait behind other programs.

``PAIR_CPU_POLICY=batch`` or ``normal`` fixes the policy (to compare: ``bench/front_door.py``,
``bench/worker_variants.py``); other systems have no such policy and are left as they are.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Literal

import msgspec

POLICY_ENV = "PAIR_CPU_POLICY"
Policy = Literal["batch", "normal"]
Setting = Literal["adaptive", "batch", "normal"]
SETTINGS: tuple[Setting, ...] = ("adaptive", "batch", "normal")

# Requests in flight at which the worker becomes a batch task, and at or under which it is a
# normal task again (``bench/README.md``, "The CPU policy follows the load", has the figures).
BATCH_AT = 16
NORMAL_AT = 4
# The least time between two switches to batch (seconds): a switch costs a system call per
# thread (about 15 us for the worker's five), so at most 8 a second cost little, and a load that
# stays is batch within a quarter of a second.
EVERY_S = 0.25
# A threshold the count never reaches: the compares on the hot path fail without a branch more.
_NEVER = sys.maxsize

log = logging.getLogger(__name__)


class Thresholds(msgspec.Struct, frozen=True):
    """When the adaptive policy switches (the defaults above unless a test says otherwise)."""

    batch_at: int = BATCH_AT
    normal_at: int = NORMAL_AT
    every_s: float = EVERY_S


def next_policy(current: Policy, in_flight: int, since_switch_s: float, at: Thresholds) -> Policy:
    """The policy the adaptive worker should have with ``in_flight`` requests, ``since_switch_s``
    seconds after it last switched."""
    if current == "normal":
        rising = in_flight >= at.batch_at and since_switch_s >= at.every_s
        return "batch" if rising else "normal"
    return "normal" if in_flight <= at.normal_at else "batch"


def wanted(environ: Mapping[str, str] | None = None) -> Setting:
    """``adaptive`` unless the environment says ``batch`` or ``normal`` (anything else: a
    warning, ``adaptive``)."""
    source = os.environ if environ is None else environ
    value = source.get(POLICY_ENV, "").strip().lower()
    for setting in SETTINGS:
        if value == setting:
            return setting
    if value:
        log.warning("%s=%r is none of adaptive, batch, normal; using adaptive", POLICY_ENV, value)
    return "adaptive"


def apply() -> Policy | None:
    """Give every thread of this process the policy it starts with (``batch`` or ``normal`` as
    the environment fixes it; ``normal`` for ``adaptive``), which threads started later inherit;
    that policy, or None where the system has none of these (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    policy: Policy = "batch" if wanted() == "batch" else "normal"
    set_threads(policy)
    return policy


def set_threads(policy: Policy) -> None:
    """Give every thread of this process ``policy``: this one first, so that a thread it starts
    meanwhile inherits it (Linux only)."""
    number = os.SCHED_BATCH if policy == "batch" else os.SCHED_OTHER
    for thread in (0, *_threads()):
        try:
            os.sched_setscheduler(thread, number, os.sched_param(0))
        except (PermissionError, ProcessLookupError) as exc:  # a thread that has just ended
            log.debug("thread %d keeps its policy: %s", thread, exc)


class Governor:
    """Counts the worker's requests in flight and switches its threads' policy as ``adaptive``
    says (``next_policy``); with a fixed setting it only counts.

    ``started`` and ``ended`` are on every request's path: each is an addition and one integer
    compare unless a threshold is crossed. ``set_policy`` applies a policy to the process,
    ``monotonic`` is the clock of the interval between switches.
    """

    __slots__ = (
        "_at",
        "_down_at",
        "_monotonic",
        "_set",
        "_setting",
        "_switched_at",
        "_up_at",
        "in_flight",
    )

    def __init__(
        self,
        setting: Setting,
        *,
        monotonic: Callable[[], float],
        set_policy: Callable[[Policy], None] = set_threads,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.in_flight = 0
        self._setting = setting
        self._at = thresholds if thresholds is not None else Thresholds()
        self._monotonic = monotonic
        self._set = set_policy
        self._switched_at = float("-inf")
        # The counts at which ``_decide`` runs: the next threshold of the policy in force.
        self._up_at = self._at.batch_at if setting == "adaptive" else _NEVER
        self._down_at = -1

    @property
    def policy(self) -> Policy:
        """The policy in force: the fixed one, or the adaptive one's last switch (``normal``
        before the first, as ``apply`` starts it)."""
        if self._setting != "adaptive":
            return self._setting
        return "batch" if self._down_at >= 0 else "normal"

    def started(self) -> None:
        """A request is in flight."""
        count = self.in_flight + 1
        self.in_flight = count
        if count >= self._up_at:
            self._decide(count)

    def ended(self) -> None:
        """A request that ``started`` is over."""
        count = self.in_flight - 1
        self.in_flight = count
        if count <= self._down_at:
            self._decide(count)

    def _decide(self, count: int) -> None:
        now = self._monotonic()
        current = self.policy
        policy = next_policy(current, count, now - self._switched_at, self._at)
        if policy == current:
            return
        self._switched_at = now
        if policy == "batch":
            self._up_at, self._down_at = _NEVER, self._at.normal_at
        else:
            self._up_at, self._down_at = self._at.batch_at, -1
        log.debug("%d requests in flight: the worker is a %s task now", count, policy)
        self._set(policy)


def governor(environ: Mapping[str, str], monotonic: Callable[[], float]) -> Governor:
    """The governor ``environ`` asks for: adaptive on Linux unless ``PAIR_CPU_POLICY`` fixes the
    policy; elsewhere one that only counts."""
    setting = wanted(environ) if sys.platform.startswith("linux") else "normal"
    return Governor(setting, monotonic=monotonic)


def _threads() -> list[int]:
    """This process's thread ids (``/proc/self/task``), or none without it."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []
