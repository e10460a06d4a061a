"""The model inventory sweep's time budget, and the slot counts it lists per model.

A sweep lists each running engine's models for ``engine:models``, node-info and the routing
table. One slow engine must not stall it: a sweep over its budget fails as a whole, and what
readers see stays the last lists that came back complete (they are replaced only by answers).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from backend.common.tasks import wait_first
from backend.components.engines.slots import loaded_instance_slots
from backend.core.clock import Clock
from backend.protocol import errors

if TYPE_CHECKING:
    from backend.components.engines.controller import EngineController

T = TypeVar("T")

SWEEP_BUDGET_S = 10.0  # each request of a sweep has its own, shorter deadline as well


async def within_budget(clock: Clock, budget: float, sweep: Awaitable[T]) -> T:
    """``sweep``'s result, or ``Unavailable`` once ``budget`` seconds of ``clock`` passed (the
    sweep is then cancelled)."""
    results: list[T] = []

    async def run() -> None:
        results.append(await sweep)

    if await wait_first(run(), clock.sleep(budget), name="engines:inventory") == 1 or not results:
        raise errors.Unavailable(
            f"listing the engines' models took longer than {budget:g} s; "
            "the last complete lists are kept"
        )
    return results[0]


async def slots_per_model(controller: EngineController, loaded: list[str]) -> dict[str, int]:
    """What each loaded model of a running engine runs at once (empty when it is not running)."""
    if not controller.running:
        return {}
    if controller.manifest.slots.source == "loaded_instances":
        try:
            return await loaded_instance_slots(
                controller.endpoint(), controller.manifest.slots.default
            )
        except errors.RpcError:
            return {}
    total = controller.status().slots or controller.manifest.slots.default
    return dict.fromkeys(loaded, total)
