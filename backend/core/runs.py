"""The run ledger: one ``broker_runs`` row per broker run, and whether that run stopped cleanly."""

from __future__ import annotations

from typing import NewType

import msgspec

from backend.core.clock import Clock
from backend.core.store import Store

RunId = NewType("RunId", int)


class BrokerRun(msgspec.Struct, frozen=True):
    """One recorded run; ``stopped_at`` is None while it runs or when it did not stop cleanly."""

    id: RunId
    pid: int
    version: str
    started_at: float
    stopped_at: float | None


class RunLedger:
    """Owns the ``broker_runs`` table of the store."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def record_start(self, *, pid: int, version: str, started_at: float) -> RunId:
        """A run began; its id, for ``record_stop``."""
        row_id = await self._store.execute(
            "INSERT INTO broker_runs (pid, version, started_at) VALUES (?, ?, ?)",
            (pid, version, started_at),
        )
        return RunId(row_id)

    async def record_stop(self, run: RunId) -> None:
        """The run stopped cleanly (the last shutdown stage records it)."""
        await self._store.execute(
            "UPDATE broker_runs SET stopped_at = ? WHERE id = ?", (self._clock.wall(), run)
        )

    async def runs(self) -> list[BrokerRun]:
        """Every recorded run, oldest first."""
        rows = await self._store.fetch_all(
            "SELECT id, pid, version, started_at, stopped_at FROM broker_runs ORDER BY id"
        )
        return [BrokerRun(RunId(row[0]), row[1], row[2], row[3], row[4]) for row in rows]
