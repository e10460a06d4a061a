"""Durable engine facts in the store: desired on/off per engine, and the processes we started."""

from __future__ import annotations

from backend.core.clock import Clock
from backend.core.store import Store


class EngineLedger:
    """Reads and writes the ``engine_desired`` and ``engine_processes`` tables."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def desired(self) -> dict[str, bool]:
        """The remembered on/off intent per engine (absent: never decided)."""
        rows = await self._store.fetch_all("SELECT engine, enabled FROM engine_desired")
        return {str(engine): bool(enabled) for engine, enabled in rows}

    async def save_desired(self, engine: str, enabled: bool) -> None:
        """Remember the intent."""
        await self._store.execute(
            "INSERT INTO engine_desired (engine, enabled, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(engine) DO UPDATE SET enabled = excluded.enabled, "
            "updated_at = excluded.updated_at",
            (engine, int(enabled), self._clock.wall()),
        )

    async def record_process(self, engine: str, pid: int, create_time: float) -> None:
        """A process we started (so a later broker can reap it if we die uncleanly)."""
        await self._store.execute(
            "INSERT OR REPLACE INTO engine_processes (pid, engine, create_time, started_at) "
            "VALUES (?, ?, ?, ?)",
            (pid, engine, create_time, self._clock.wall()),
        )

    async def forget_process(self, pid: int) -> None:
        """The process ended."""
        await self._store.execute("DELETE FROM engine_processes WHERE pid = ?", (pid,))

    async def recorded_processes(self) -> list[tuple[int, str, float]]:
        """Processes a previous run started and did not see end: (pid, engine, create time)."""
        rows = await self._store.fetch_all("SELECT pid, engine, create_time FROM engine_processes")
        return [(int(pid), str(engine), float(created)) for pid, engine, created in rows]
