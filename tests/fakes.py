"""Test doubles shared by unit tests (no I/O)."""

from __future__ import annotations

import asyncio
from typing import Literal

from backend.protocol.types.broker import ErrorAction, Severity

SleepMode = Literal["jump", "brief", "wait"]


async def settle(rounds: int = 20) -> None:
    """Let every ready task run until it waits for something the test controls."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeClock:
    """A ``Clock`` (and a bare ``() -> float`` reading) whose time the test controls.

    What a sleep does is the test's choice, and every sleep is recorded in ``sleeps``:
    ``"jump"`` moves time on by the sleep and yields once; ``"brief"`` leaves time still and
    really waits at most 10 ms (for loops that must not spin); ``"wait"`` holds the sleeper
    until ``advance`` brings its time. ``step`` is added to the time on every monotonic reading.
    """

    def __init__(
        self, start: float = 1_000_000.0, *, on_sleep: SleepMode = "jump", step: float = 0.0
    ) -> None:
        self.now = start
        self.step = step
        self.on_sleep: SleepMode = on_sleep
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        """The time, moved on by ``step`` first."""
        self.now += self.step
        return self.now

    def __call__(self) -> float:
        """The same as ``monotonic``, for code that takes a bare clock function."""
        return self.monotonic()

    def wall(self) -> float:
        """The time (wall and monotonic time are one here)."""
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Record the sleep, then jump, wait briefly or wait for ``advance`` (see the class)."""
        self.sleeps.append(seconds)
        if self.on_sleep == "jump":
            self.now += seconds
            await asyncio.sleep(0)
        elif self.on_sleep == "brief":
            await asyncio.sleep(min(seconds, 0.01))
        else:
            wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._sleepers.append((self.now + seconds, wake))
            await wake

    async def advance(self, seconds: float) -> None:
        """Move time on, wake the sleepers whose time has come and let them run."""
        self.now += seconds
        for due, wake in self._sleepers:
            if due <= self.now and not wake.done():
                wake.set_result(None)
        self._sleepers = [(due, wake) for due, wake in self._sleepers if not wake.done()]
        await settle()


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
