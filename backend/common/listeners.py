"""Callbacks to tell that something changed: each one is called, in the order added."""

from __future__ import annotations

from collections.abc import Callable


class Listeners:
    """``add`` a ``listener()``; ``notify`` calls every one (no arguments: each reads what it
    needs from the thing that changed)."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def add(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` at every ``notify`` from now on."""
        self._listeners.append(listener)

    def notify(self) -> None:
        """Call every listener."""
        for listener in self._listeners:
            listener()
