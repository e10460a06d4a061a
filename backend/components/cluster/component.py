"""The cluster component: runs the invite clock and the roster pushes.

The invite clock expires invites on both sides every second. The roster pushes send this
node's roster to every member when the membership asks for it (after a pairing, a merge that
taught something new, a removal, a rename) and every 30 s anyway, so a member that was offline
catches up, and a removed member keeps being told until it hears it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from backend.common.tasks import TaskSet, wait_first
from backend.components.cluster.service import ClusterService
from backend.core.clock import Clock
from backend.core.component import Component

log = logging.getLogger(__name__)

TICK_S = 1.0
PUSH_BACKSTOP_S = 30.0
CLOSE_TIMEOUT_S = 2.0


class ClusterComponent(Component):
    """Owns no socket (the node API serves the routes); owns the invite clock and the roster
    push loop (a ``TaskSet``, closed when ``run`` ends)."""

    def __init__(
        self,
        service: ClusterService,
        *,
        clock: Clock,
        tick: float = TICK_S,
        push_backstop: float = PUSH_BACKSTOP_S,
    ) -> None:
        super().__init__("cluster")
        self.service = service
        self._clock = clock
        self._tick = tick
        self._push_backstop = push_backstop
        self._stopped = asyncio.Event()
        self._tasks = TaskSet("cluster")

    async def run(self) -> None:
        """Expire invites and push rosters until stopped."""
        self._stopped.clear()
        self._tasks.spawn(self._push_rosters(), name="roster-push")
        self.announce_ready()
        try:
            while not self._stopped.is_set():
                self.service.deadline_added.clear()
                await self.service.expire()
                # Ticks only while something can expire; at rest it waits for an invite or the
                # join window (an idle broker is not woken every second for nothing).
                if self.service.has_deadlines():
                    wake: Coroutine[Any, Any, object] = self._clock.sleep(self._tick)
                else:
                    wake = self.service.deadline_added.wait()
                # A stop ends the wait at once: a broker's shutdown waits for this component.
                await wait_first(self._stopped.wait(), wake, name="cluster:tick")
        finally:
            await asyncio.shield(self._tasks.close(timeout=CLOSE_TIMEOUT_S))

    async def stop(self) -> None:
        """Let ``run`` return now, without waiting for its next tick."""
        self._stopped.set()

    async def _push_rosters(self) -> None:
        keeper = self.service.roster
        while True:
            await wait_first(
                keeper.wait_for_push_request(),
                self._clock.sleep(self._push_backstop),
                name="cluster:roster-wait",
            )
            try:
                await keeper.push_all()
            except Exception:  # a round that broke must not end the pushes for good
                log.exception("roster push round failed")
