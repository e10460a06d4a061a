"""The cluster component: runs the invite clock (expiry on both sides, every second)."""

from __future__ import annotations

import asyncio
import logging

from backend.components.cluster.service import ClusterService
from backend.core.clock import Clock
from backend.core.component import Component

log = logging.getLogger(__name__)

TICK_S = 1.0


class ClusterComponent(Component):
    """Owns no socket (the node API serves the routes); its one task is the invite clock."""

    def __init__(self, service: ClusterService, *, clock: Clock, tick: float = TICK_S) -> None:
        super().__init__("cluster")
        self.service = service
        self._clock = clock
        self._tick = tick
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Expire invites until stopped."""
        self._stopped.clear()
        self.announce_ready()
        while not self._stopped.is_set():
            await self.service.expire()
            await self._clock.sleep(self._tick)

    async def stop(self) -> None:
        """Let ``run`` return at its next tick."""
        self._stopped.set()
