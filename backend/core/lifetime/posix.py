"""Linux and the parts of macOS shared with it: an own process group, so ``killpg`` ends the tree.

On Linux the group stays in the broker's session. A session of its own would also be an
*autogroup* of its own (``/proc/sys/kernel/sched_autogroup_enabled``, on by default on most
desktop kernels): the scheduler shares the CPU between autogroups first, and a busy child alone
in one was seen starved for 2-5 s at a time while two other programs kept the cores busy
(bench/README.md, "Autogroups"). In the broker's session the proxy worker and the engines share
one group with the broker, as the processes of one application do (the app starts its broker in
a session of its own: ``app/broker/process.py``), so the worker is not alone in a group while
the engine it relays for is busy.
"""

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


def posix_preexec(
    *, parent_death: bool, ignore_sigpipe: bool, own_group: bool = False
) -> Callable[[], None] | None:
    """What the child runs between fork and exec. ``parent_death`` (Linux): SIGKILL from the
    kernel when the broker thread that spawned it dies; ``ignore_sigpipe``: the disposition
    survives exec, so a write to a peer that hung up fails with EPIPE instead of killing it;
    ``own_group``: a process group of its own (``setpgid(0, 0)``; uvloop's spawn has no
    ``process_group`` keyword)."""
    if not (parent_death or ignore_sigpipe or own_group):
        return None
    libc = ctypes.CDLL(None, use_errno=True) if parent_death else None

    def preexec() -> None:
        if own_group:
            os.setpgid(0, 0)
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if ignore_sigpipe:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    return preexec


@dataclass(frozen=True)
class ProcessGroup:
    """A child started in a process group (or session) of its own: its PID is the group's,
    which its own children join unless they leave it on purpose."""

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
    """Own process group in the broker's session (its tree is that group; the module says why
    not a session) and the parent-death signal (only Linux has ``PR_SET_PDEATHSIG``;
    ``parent_death`` False for other POSIX systems)."""

    parent_death: bool = True
    kill_group: KillGroup = field(default=os.killpg, repr=False)

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        """The argv unchanged: the kernel watches the broker for us."""
        return list(argv)

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        """The preexec: a new process group, and the parent-death signal."""
        preexec = posix_preexec(
            parent_death=self.parent_death, ignore_sigpipe=ignore_sigpipe, own_group=True
        )
        return SpawnOptions(preexec_fn=preexec)

    def adopt(self, child: StartedChild) -> ChildTree:
        """The child's process group."""
        return ProcessGroup(child.pid, self.kill_group)

    def kill_orphan(self, pid: int) -> None:
        """SIGKILL the orphan's process group."""
        ProcessGroup(pid, self.kill_group).end(Ending.KILL)
