"""Test doubles shared by unit tests (no I/O)."""

from __future__ import annotations

import asyncio

from backend.protocol.types import ErrorAction, Severity


class FakeClock:
    """Time moves only when someone sleeps; every sleep is recorded."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class RecordingErrors:
    """An ErrorSink that keeps the current errors and the history of raises."""

    def __init__(self) -> None:
        self.open: dict[str, str] = {}
        self.raised: list[str] = []

    def raise_error(
        self,
        error_id: str,
        message: str,
        *,
        severity: Severity = "error",
        action: ErrorAction | None = None,
    ) -> None:
        self.open[error_id] = message
        self.raised.append(error_id)

    def clear_error(self, error_id: str) -> None:
        self.open.pop(error_id, None)
