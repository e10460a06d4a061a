"""Operations that must run alone on a drained engine, and the gate that grants them.

Loading, unloading or deleting a model, switching a one-model engine to another model,
updating and restarting an engine all change what the engine can serve, so they run only once
every request PAIR sent the engine has finished, and no new request starts until they end
(docs/SCHEDULER.md). The requests queue in the proxy worker's scheduler; the engines component
asks that scheduler for the engine through an ``ExclusiveGate`` before it takes the engine's
lock (always in that order: the scheduler's own model switch takes the lock without the gate,
so the reverse order could deadlock).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

ExclusiveKind = Literal["load", "unload", "delete", "switch", "update", "restart"]


class ExclusiveGate(Protocol):
    """Grants an engine to one exclusive operation at a time, once its requests drained."""

    def hold(
        self, engine: str, kind: ExclusiveKind, model: str | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Wait until ``engine`` is drained and held for ``kind``; release on exit."""
        ...


class OpenGate:
    """No scheduler to ask (no proxy worker, or unit tests): every operation runs at once."""

    @contextlib.asynccontextmanager
    async def hold(
        self, engine: str, kind: ExclusiveKind, model: str | None = None
    ) -> AsyncIterator[None]:
        """Grant at once."""
        yield


OPEN_GATE = OpenGate()
