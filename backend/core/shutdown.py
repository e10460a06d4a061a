"""Staged, time-boxed shutdown: each stage gets its own budget inside a total budget."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

log = logging.getLogger(__name__)


class Stage(msgspec.Struct, frozen=True):
    """One step of shutdown: a name, its time box, and the work."""

    name: str
    budget: float
    work: Callable[[], Awaitable[Any]]


async def run_stages(stages: list[Stage], *, budget: float) -> dict[str, float]:
    """Run stages in order; a stage that overruns is cancelled and the next one starts.

    Returns the seconds each stage took. Shielded so a second cancellation cannot skip cleanup.
    """
    return await asyncio.shield(_run(stages, budget))


async def _run(stages: list[Stage], budget: float) -> dict[str, float]:
    deadline = time.monotonic() + budget
    taken: dict[str, float] = {}
    for stage in stages:
        started = time.monotonic()
        allowed = max(0.05, min(stage.budget, deadline - started))
        try:
            async with asyncio.timeout(allowed):
                await stage.work()
        except TimeoutError:
            log.warning("shutdown stage %s overran its %.1f s budget", stage.name, allowed)
        except Exception:
            log.exception("shutdown stage %s failed", stage.name)
        taken[stage.name] = time.monotonic() - started
    total = sum(taken.values())
    level = logging.WARNING if total > 2.0 else logging.INFO
    log.log(
        level,
        "shutdown took %.2f s (%s)",
        total,
        ", ".join(f"{name} {seconds:.2f} s" for name, seconds in taken.items()),
    )
    return taken
