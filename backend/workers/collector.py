"""The cycle collector in a hot worker: start-up frozen, the young generation walked rarely.

CPython collects its youngest generation whenever container allocations outnumber frees by
700. A proxy worker serving many requests at once holds every one's coroutines, futures,
header multidicts and buffers in that generation (some 3,000 objects at 32 requests in flight,
counted with ``gc.get_objects(0)``), so at 700 it walked all of them about once per 24 JSON
requests, and found nothing to free: the relay makes no reference cycles (with
``gc.DEBUG_SAVEALL`` not one object was saved over 4,000 requests); counted by callgrind,
those walks were some 5 % of the worker's instructions per JSON request at c=32. At
``GEN0_THRESHOLD`` the walks are some 70 times rarer, and each costs about the same, as it is
bounded by what is in flight, not by the threshold.

What cycles there are (a failed attempt's exception and its traceback, which may hold the
request's body) would then wait for that many allocations, that is for traffic, so ``sweep``
also collects that generation every ``SWEEP_S``: one walk of what is in flight per second at
most. While the generation holds little at a sweep (``IDLE_COUNT``: an idle worker's heartbeats)
the next sweep waits twice as long, up to ``SWEEP_IDLE_MAX_S``, so an idle worker is not woken
every second for nothing; the first sweep that finds more goes back to ``SWEEP_S``. What
start-up made (modules, the service) lives as long as the process and is frozen first, so the
full passes need not walk it again either. ``PAIR_GC_GEN0`` sets another threshold (to compare:
``bench/worker_variants.py``); a value that is not a positive integer is ignored.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os

GEN0_THRESHOLD = 50_000
GEN0_ENV = "PAIR_GC_GEN0"
SWEEP_S = 1.0
SWEEP_IDLE_MAX_S = 16.0
# Fewer container objects than this in the young generation at a sweep: nothing is going on.
IDLE_COUNT = 1_000

log = logging.getLogger(__name__)


def gen0_threshold() -> int:
    """``GEN0_THRESHOLD``, or the environment's positive integer instead."""
    value = os.environ.get(GEN0_ENV, "").strip()
    if not value:
        return GEN0_THRESHOLD
    if value.isdigit() and int(value) > 0:
        return int(value)
    log.warning("%s=%r is not a positive integer; using %d", GEN0_ENV, value, GEN0_THRESHOLD)
    return GEN0_THRESHOLD


def settle() -> None:
    """Freeze what exists now; collect the youngest generation per ``gen0_threshold()``."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(gen0_threshold(), older, oldest)


async def sweep(interval_s: float = SWEEP_S, idle_max_s: float = SWEEP_IDLE_MAX_S) -> None:
    """Collect the youngest generation every ``interval_s`` (up to ``idle_max_s`` while it
    stays under ``IDLE_COUNT``), until cancelled."""
    wait = interval_s
    while True:
        await asyncio.sleep(wait)
        young = gc.get_count()[0]
        gc.collect(0)
        wait = min(wait * 2, idle_max_s) if young < IDLE_COUNT else interval_s
