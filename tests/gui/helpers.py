"""Helpers for async GUI tests: polling waits and a scripted broker connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.state import Ownership, ServiceState


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Let the loop run until ``predicate()`` holds; fail after ``timeout`` seconds.

    Polling (not an event) because the conditions span Qt widgets and broker processes.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(0.02)


async def settle() -> None:
    """Let already scheduled callbacks and tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


class FakeConnection(BrokerConnection):
    """A connection without a broker: scripted call results, pushes emitted by the test."""

    def __init__(self) -> None:
        super().__init__(BrokerLaunch(Path("/nonexistent/pair-test")))
        self.calls: list[tuple[str, Any]] = []
        self.results: dict[str, list[Any]] = {}
        self.fake_ownership: Ownership | None = None

    @property
    def ownership(self) -> Ownership | None:
        return self.fake_ownership

    @property
    def pid(self) -> int | None:
        return 4242 if self.fake_ownership is not None else None

    async def call(self, method: str, params: Any = None, timeout: float = 10.0) -> Any:
        self.calls.append((method, params))
        queue = self.results.get(method)
        if not queue:
            return None
        value = queue.pop(0)
        if isinstance(value, asyncio.Future):
            value = await value
        if isinstance(value, Exception):
            raise value
        return value

    def script(self, method: str, *results: Any) -> None:
        """Queue results for ``method``: a value, an exception to raise, or a future to await."""
        self.results.setdefault(method, []).extend(results)

    def become_ready(self, ownership: Ownership = Ownership.OWNED) -> None:
        """Pretend a session started and is ready."""
        self.fake_ownership = ownership
        self.session_changed.emit()
        self._set_state(ServiceState.READY)
        self.session_ready.emit()

    def lose_session(self, state: ServiceState = ServiceState.DISCONNECTED) -> None:
        """Pretend the session ended."""
        self.fake_ownership = None
        self.session_changed.emit()
        self._set_state(state)

    def push(self, method: str, params: Any) -> None:
        """Deliver a push as the broker would."""
        self.notification_received.emit(method, params)
