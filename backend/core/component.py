"""The component contract every supervised piece of the broker follows."""

from __future__ import annotations

import abc
from collections.abc import Callable

from backend.protocol.types.broker import ComponentKind


class FatalError(Exception):
    """The component cannot work in this configuration; the supervisor will not restart it."""


class NotReadyError(Exception):
    """A dependency is not there yet; retry with backoff without counting it as a crash."""


class Component(abc.ABC):
    """A long-lived part of the broker run by the supervisor.

    ``run()`` returns only on cancellation or raises on a fatal error or crash; ``stop()`` asks it
    to return and is idempotent. A component that needs start-up work calls ``announce_ready()``
    when it can serve; one with ``ready_on_start`` is ready as soon as ``run()`` starts.
    """

    kind: ComponentKind = "task"
    ready_on_start: bool = True

    def __init__(self, name: str) -> None:
        self.name = name
        self._on_ready: Callable[[], None] | None = None

    @abc.abstractmethod
    async def run(self) -> None:
        """Do the component's work until cancelled."""

    async def stop(self) -> None:  # noqa: B027 - optional hook, cancellation is the default
        """Ask ``run()`` to finish; the supervisor cancels it after a grace period anyway."""

    def pid(self) -> int | None:
        """The operating-system process behind this component, for workers."""
        return None

    def bind_ready(self, callback: Callable[[], None] | None) -> None:
        """Set by the supervisor before each ``run()``."""
        self._on_ready = callback

    def announce_ready(self) -> None:
        """Tell the supervisor this run is serving (clears its crash error)."""
        if self._on_ready is not None:
            self._on_ready()
