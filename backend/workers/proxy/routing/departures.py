"""A node leaving the routing table, as the attempts waiting on it see it.

Each attempt waiting for its commit watches its node's "gone" signal (``Departures``); a new
table sets the signals of the nodes it no longer lists, and ``unless_gone`` ends the attempt's
work when its node goes first. The attempt owns both and ends itself, so nothing outside it
cancels the request's handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Coroutine
from typing import Any, TypeVar

import msgspec

from backend.workers.proxy.upstream.attempt import Failure

_T = TypeVar("_T")


class Gone:
    """Set once a node leaves the routing table; calls what waits on it (no task per wait)."""

    __slots__ = ("_callbacks", "_set")

    def __init__(self) -> None:
        self._set = False
        self._callbacks: dict[int, Callable[[], None]] = {}

    def is_set(self) -> bool:
        """Whether the node has left."""
        return self._set

    def set(self) -> None:
        """The node left: call every waiter once."""
        if self._set:
            return
        self._set = True
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks.values():
            callback()

    def on_set(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when set (until ``off(callback)``)."""
        self._callbacks[id(callback)] = callback

    def off(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback``."""
        self._callbacks.pop(id(callback), None)


class _Watch(msgspec.Struct, eq=False):
    gone: Gone = msgspec.field(default_factory=Gone)
    attempts: int = 0


class _Watching:
    """``Departures.watch``'s context: a class, cheaper per attempt than a generator's."""

    __slots__ = ("_departures", "_entry", "_node")

    def __init__(self, departures: Departures, node: str) -> None:
        self._departures = departures
        self._node = node
        self._entry = departures.enter(node)

    def __enter__(self) -> Gone:
        return self._entry.gone

    def __exit__(self, *_: object) -> None:
        self._departures.leave(self._node, self._entry)


class Departures:
    """One "gone" signal per node that attempts are waiting on, set when it leaves the table."""

    def __init__(self) -> None:
        self._watched: dict[str, _Watch] = {}

    def watch(self, node: str) -> _Watching:
        """The signal set once ``node`` leaves the table, while the ``with`` block waits on it."""
        return _Watching(self, node)

    def enter(self, node: str) -> _Watch:
        """One more attempt waits on ``node``."""
        entry = self._watched.get(node)
        if entry is None:
            entry = self._watched[node] = _Watch()
        entry.attempts += 1
        return entry

    def leave(self, node: str, entry: _Watch) -> None:
        """That attempt is done waiting."""
        entry.attempts -= 1
        # A node that left and came back has a fresh entry: leave that one alone.
        if entry.attempts == 0 and self._watched.get(node) is entry:
            del self._watched[node]

    def table_changed(self, present: Container[str]) -> None:
        """Signal every watched node that is not in the new table."""
        for node in [node for node in self._watched if node not in present]:
            self._watched.pop(node).gone.set()

    def __len__(self) -> int:
        return len(self._watched)


class _Race:
    """``unless_gone``'s state: the caller's task, and whether the departure cut its work."""

    __slots__ = ("cut", "done", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.done = False
        self.cut = False

    def later(self) -> None:  # the task may be running now: cut it once it waits
        asyncio.get_running_loop().call_soon(self._cut)

    def _cut(self) -> None:
        if not self.done:
            self.cut = True
            self.task.cancel()


async def unless_gone(work: Coroutine[Any, Any, _T], gone: Gone, node: str) -> _T | Failure:
    """Run ``work`` (a ``precommit``) until it ends or ``gone`` is set, whichever comes first.

    When the node goes first the attempt cancels its own upstream request (closing the
    connection, so the engine stops working on it) and ends with a ``target-gone`` failure.
    A client that disconnects cancels the caller, and with it the work. The work runs in the
    caller's task: the departure cancels that task's current wait, from a callback that does
    nothing once the work has its outcome.
    """
    if gone.is_set():
        work.close()
        return Failure("target-gone", f"node {node} left the table")
    task = asyncio.current_task()
    assert task is not None
    race = _Race(task)
    later = race.later
    gone.on_set(later)
    try:
        outcome = await work
    except asyncio.CancelledError:
        if race.cut and task.uncancel() == 0:
            return Failure("target-gone", f"node {node} left the table")
        raise
    finally:
        race.done = True
        gone.off(later)
    return outcome
