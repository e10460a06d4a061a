"""What tying a child's life to the broker's means, whatever the OS: the contract each OS meets."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Protocol, TypedDict


class Ending(enum.Enum):
    """How to end a child's tree: ask it to stop, or kill everything in it now."""

    TERMINATE = "terminate"
    KILL = "kill"


class SpawnOptions(TypedDict, total=False):
    """Keyword arguments for ``subprocess.Popen`` / ``asyncio.create_subprocess_exec``; an OS
    gets only the ones it accepts (POSIX refuses ``creationflags``, Windows ``preexec_fn``)."""

    preexec_fn: Callable[[], None] | None
    start_new_session: bool
    creationflags: int


class StartedChild(Protocol):
    """A child just started (``subprocess.Popen``, ``asyncio.subprocess.Process``)."""

    @property
    def pid(self) -> int:
        """Its process ID."""
        ...

    def terminate(self) -> None:
        """End it through the handle its start returned (never a recycled PID)."""
        ...


class ChildTree(Protocol):
    """A started child and whatever it starts in turn, held until it has been reaped."""

    def end(self, ending: Ending) -> None:
        """Signal the whole tree; nothing happens to a tree already gone."""
        ...

    def release(self) -> None:
        """Let go of it once the child was reaped (what is left in the tree dies)."""
        ...


class ChildLifetime(Protocol):
    """How this OS starts a child that dies with the broker, and ends its whole tree."""

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        """The argv to start for ``argv`` (a launcher may go in front of it)."""
        ...

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        """Keywords for the spawn; ``ignore_sigpipe`` (POSIX): EPIPE instead of death."""
        ...

    def adopt(self, child: StartedChild) -> ChildTree:
        """Right after the start: tie ``child``'s tree to us; return the handle that ends it."""
        ...

    def kill_orphan(self, pid: int) -> None:
        """Kill the tree of a previous broker's child whose identity the caller checked."""
        ...
