"""macOS: an own session (so ``killpg`` ends the tree) and a watchdog launcher in front of the
child, because macOS has no parent-death signal (see ``guard.py``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import backend.core.lifetime.guard as guard
from backend.common.self_command import is_frozen
from backend.core.lifetime.base import ChildTree, Ending, SpawnOptions, StartedChild
from backend.core.lifetime.posix import KillGroup, ProcessGroup, posix_preexec


def default_guard_command() -> list[str]:
    """The launcher as a plain script under this interpreter, isolated from ``PYTHON*``
    variables (the child still gets them: they are in the environment it is given); in a
    frozen app, which has no script to run, ``pair lifetime-guard`` (``backend/cli/main.py``)."""
    if is_frozen():
        return [sys.executable, "lifetime-guard"]
    return [sys.executable, "-I", str(Path(guard.__file__))]


@dataclass(frozen=True)
class MacLifetime:
    """Own session plus the watchdog: when the broker exits, the launcher kills the group."""

    guard_command: Sequence[str] | None = field(default_factory=default_guard_command)
    broker_pid: Callable[[], int] = field(default=os.getpid, repr=False)
    kill_group: KillGroup = field(default=os.killpg, repr=False)

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        """``GUARD BROKER_PID [--ignore-sigpipe] -- ARGV...``, or ``argv`` alone when there is
        no launcher (the launcher passes the SIGPIPE disposition on to the child)."""
        if self.guard_command is None:
            return list(argv)
        option = [guard.IGNORE_SIGPIPE] if ignore_sigpipe else []
        return [*self.guard_command, str(self.broker_pid()), *option, "--", *argv]

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        """A new session (the launcher's group holds the child); SIGPIPE ignored on request
        (for the child itself when it goes without a launcher)."""
        preexec = posix_preexec(parent_death=False, ignore_sigpipe=ignore_sigpipe)
        return SpawnOptions(preexec_fn=preexec, start_new_session=True)

    def adopt(self, child: StartedChild) -> ChildTree:
        """The launcher's process group, which holds the child and what it starts."""
        return ProcessGroup(child.pid, self.kill_group)

    def kill_orphan(self, pid: int) -> None:
        """SIGKILL the orphan's process group."""
        ProcessGroup(pid, self.kill_group).end(Ending.KILL)
