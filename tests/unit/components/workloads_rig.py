"""Pieces the workloads component tests share: a subscriber that keeps what was pushed to it
and the component running for the length of a block."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from backend.components.workloads.component import WorkloadsComponent
from backend.protocol import methods
from backend.protocol.types.jobs import WorkloadsEvent, WorkloadUpserted


class Subscriber:
    """Stands in for a subscribed client: keeps every ``workloads:event`` pushed to it."""

    def __init__(self) -> None:
        self.events: list[WorkloadsEvent] = []

    def notify(self, method: str, params: Any = None) -> None:
        """Keep one push (it must be a workloads event)."""
        assert method == methods.WORKLOADS_EVENT.name
        self.events.append(params)

    def states(self) -> list[tuple[str, str | None]]:
        """The (key, state) of every event, None for a removal."""
        return [
            (event.key, event.workload.state if isinstance(event, WorkloadUpserted) else None)
            for event in self.events
        ]


@asynccontextmanager
async def running(workloads: WorkloadsComponent) -> AsyncIterator[None]:
    """``workloads`` running (its history loaded) until the block ends."""
    ready = asyncio.Event()
    workloads.bind_ready(ready.set)
    task = asyncio.create_task(workloads.run(), name="workloads")
    await asyncio.wait_for(ready.wait(), 5)
    try:
        yield
    finally:
        await workloads.stop()
        await asyncio.wait_for(task, 5)
