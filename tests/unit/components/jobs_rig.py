"""Pieces the jobs component tests share: a subscriber that keeps what was pushed to it
and the component running for the length of a block."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from backend.components.jobs.component import JobsComponent
from backend.protocol import methods
from backend.protocol.types.jobs import JobsEvent, JobUpserted


class Subscriber:
    """Stands in for a subscribed client: keeps every ``jobs:event`` pushed to it."""

    def __init__(self) -> None:
        self.events: list[JobsEvent] = []

    def notify(self, method: str, params: Any = None) -> None:
        """Keep one push (it must be a jobs event)."""
        assert method == methods.JOBS_EVENT.name
        self.events.append(params)

    def states(self) -> list[tuple[str, str | None]]:
        """The (key, state) of every event, None for a removal."""
        return [
            (event.key, event.job.state if isinstance(event, JobUpserted) else None)
            for event in self.events
        ]


@asynccontextmanager
async def running(jobs: JobsComponent) -> AsyncIterator[None]:
    """``jobs`` running (its history loaded) until the block ends."""
    ready = asyncio.Event()
    jobs.bind_ready(ready.set)
    task = asyncio.create_task(jobs.run(), name="jobs")
    await asyncio.wait_for(ready.wait(), 5)
    try:
        yield
    finally:
        await jobs.stop()
        await asyncio.wait_for(task, 5)
