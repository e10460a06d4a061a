"""Linux and the parts of macOS shared with it: an own session, so ``killpg`` ends the tree."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from backend.core.lifetime.base import ChildTree, Ending, SpawnOptions, StartedChild

_PR_SET_PDEATHSIG = 1

_SIGNALS = {Ending.TERMINATE: signal.SIGTERM, Ending.KILL: signal.SIGKILL}

KillGroup = Callable[[int, int], None]


def posix_preexec(*, parent_death: bool, ignore_sigpipe: bool) -> Callable[[], None] | None:
    """What the child runs between fork and exec. ``parent_death`` (Linux): SIGKILL from the
    kernel when the broker thread that spawned it dies; ``ignore_sigpipe``: the disposition
    survives exec, so a write to a peer that hung up fails with EPIPE instead of killing it."""
    if not (parent_death or ignore_sigpipe):
        return None
    libc = ctypes.CDLL(None, use_errno=True) if parent_death else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if ignore_sigpipe:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    return preexec


@dataclass(frozen=True)
class ProcessGroup:
    """A child started in its own session: its PID is its process group's, which its own
    children join unless they leave it on purpose."""

    pid: int
    kill_group: KillGroup = field(default=os.killpg, repr=False)

    def end(self, ending: Ending) -> None:
        """Signal every process in the group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.kill_group(self.pid, _SIGNALS[ending])

    def release(self) -> None:
        """Nothing to let go of: the kernel holds the group."""


@dataclass(frozen=True)
class LinuxLifetime:
    """Own session (its tree is one process group) and the parent-death signal (only Linux has
    ``PR_SET_PDEATHSIG``; ``parent_death`` False for other POSIX systems)."""

    parent_death: bool = True
    kill_group: KillGroup = field(default=os.killpg, repr=False)

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        """The argv unchanged: the kernel watches the broker for us."""
        return list(argv)

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        """A new session and the parent-death preexec."""
        preexec = posix_preexec(parent_death=self.parent_death, ignore_sigpipe=ignore_sigpipe)
        return SpawnOptions(preexec_fn=preexec, start_new_session=True)

    def adopt(self, child: StartedChild) -> ChildTree:
        """The child's process group."""
        return ProcessGroup(child.pid, self.kill_group)

    def kill_orphan(self, pid: int) -> None:
        """SIGKILL the orphan's process group."""
        ProcessGroup(pid, self.kill_group).end(Ending.KILL)
