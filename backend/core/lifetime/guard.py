"""The macOS watchdog launcher: ``python guard.py BROKER_PID [--ignore-sigpipe] -- ARGV...``.

macOS has no parent-death signal, so a child of the broker is started through this launcher.
It runs ``ARGV`` as its own child in its own process group (the broker started the launcher in
a new session, so the group is the launcher's), waits for the broker or the child to exit, and
when the broker goes first it SIGKILLs the whole group, itself included. When the child exits
first it exits the same way (code or signal), so to the broker it looks like the child itself.
SIGTERM from the broker reaches the whole group; the launcher ignores it and waits for the
child's exit. It imports only the standard library, so it runs as a plain script whatever the
working directory and ``PYTHONPATH`` are. Exits are watched with kqueue (macOS, BSD) or with
pidfds (Linux, where it can be tested end to end).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Literal, Protocol

Gone = Literal["broker", "child"]

IGNORE_SIGPIPE = "--ignore-sigpipe"


class ExitWatch(Protocol):
    """Exits of processes that are not (necessarily) ours, one at a time."""

    def watch(self, pid: int) -> None:
        """Report ``pid``'s exit; ProcessLookupError when it is already gone."""
        ...

    def wait(self) -> int:
        """Block until a watched PID exits; return it."""
        ...

    def close(self) -> None:
        """Let go of the watch."""
        ...


class KqueueExits:
    """``EVFILT_PROC`` / ``NOTE_EXIT`` on a kqueue; ``kq`` is the ``select`` module or a fake."""

    def __init__(self, kq: ModuleType = select) -> None:
        self._kq = kq
        self._queue = kq.kqueue()

    def watch(self, pid: int) -> None:
        """Register ``pid`` (ESRCH, raised as ProcessLookupError, when it is gone)."""
        kq = self._kq
        event = kq.kevent(
            pid,
            filter=kq.KQ_FILTER_PROC,
            flags=kq.KQ_EV_ADD | kq.KQ_EV_ONESHOT,
            fflags=kq.KQ_NOTE_EXIT,
        )
        self._queue.control([event], 0)

    def wait(self) -> int:
        """The PID of the next exit event."""
        while True:
            for event in self._queue.control(None, 1):
                return int(event.ident)

    def close(self) -> None:
        """Close the kqueue."""
        self._queue.close()


class PidfdExits:
    """Linux pidfds in a poll set (``os.pidfd_open``: Linux 5.3)."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._pids: dict[int, int] = {}

    def watch(self, pid: int) -> None:
        """Open a pidfd for ``pid`` (ProcessLookupError when it is gone)."""
        fd = os.pidfd_open(pid)
        self._pids[fd] = pid
        self._poll.register(fd, select.POLLIN)

    def wait(self) -> int:
        """The PID whose pidfd became readable (it exited)."""
        while True:
            for fd, _ in self._poll.poll():
                return self._pids[fd]

    def close(self) -> None:
        """Close the pidfds."""
        for fd in self._pids:
            os.close(fd)
        self._pids.clear()


def exit_watch() -> ExitWatch:
    """The watch this OS has."""
    if hasattr(select, "kqueue"):
        return KqueueExits()
    return PidfdExits()


def wait_first(
    watch: ExitWatch, broker_pid: int, child_pid: int, gone_already: Callable[[], Gone | None]
) -> Gone:
    """Which of the broker and the child exits first. ``gone_already`` is asked once both are
    watched: an exit just before the watch began may never be reported (a zombie child)."""
    pids: dict[int, Gone] = {broker_pid: "broker", child_pid: "child"}
    try:
        for pid, name in pids.items():
            try:
                watch.watch(pid)
            except ProcessLookupError:
                return name
        if gone := gone_already():
            return gone
        while (pid := watch.wait()) not in pids:
            pass
        return pids[pid]
    finally:
        watch.close()


def exit_like(returncode: int, *, kill: Callable[[int, int], None] = os.kill) -> int:
    """Exit as the child did: the same code, or death by the same signal."""
    if returncode >= 0:
        return returncode
    signal.signal(-returncode, signal.SIG_DFL)
    kill(os.getpid(), -returncode)
    return 128 - returncode  # the signal did not end us (it is one a process may survive)


def start_child(argv: Sequence[str], ignore_sigpipe: bool) -> subprocess.Popen[bytes]:
    """Start ``argv`` with our stdio and environment. ``subprocess`` resets SIGPIPE to the
    default before exec; ``ignore_sigpipe`` sets it back to ignored after that reset."""

    def ignore() -> None:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    return subprocess.Popen(argv, preexec_fn=ignore if ignore_sigpipe else None)


def guard(
    broker_pid: int,
    argv: Sequence[str],
    *,
    watch: ExitWatch,
    ignore_sigpipe: bool = False,
    start: Callable[[Sequence[str], bool], subprocess.Popen[bytes]] | None = None,
    getppid: Callable[[], int] = os.getppid,
    kill_group: Callable[[int, int], None] = os.killpg,
) -> int:
    """Run ``argv`` until it exits (its status) or the broker exits (the group is killed)."""
    try:
        child = (start or start_child)(argv, ignore_sigpipe)
    except OSError as error:
        print(f"guard: cannot start {argv[0]}: {error}", file=sys.stderr)
        return 127

    def gone_already() -> Gone | None:
        # Our parent is the broker until it exits (then we are someone else's).
        if getppid() != broker_pid:
            return "broker"
        return "child" if child.poll() is not None else None

    if (gone_already() or wait_first(watch, broker_pid, child.pid, gone_already)) == "broker":
        kill_group(os.getpgid(0), signal.SIGKILL)
    return child.wait()


def parse(args: Sequence[str]) -> tuple[int, bool, list[str]]:
    """``BROKER_PID [--ignore-sigpipe] -- ARGV...`` read; ValueError when it is not that."""
    args = list(args)
    ignore_sigpipe = len(args) > 1 and args[1] == IGNORE_SIGPIPE
    if ignore_sigpipe:
        del args[1]
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        raise ValueError(f"usage: guard.py BROKER_PID [{IGNORE_SIGPIPE}] -- ARGV...")
    return int(args[0]), ignore_sigpipe, args[2:]


def main(args: Sequence[str] | None = None) -> int:
    """The launcher's entry."""
    try:
        broker_pid, ignore_sigpipe, argv = parse(sys.argv[1:] if args is None else args)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    # A handler, not SIG_IGN: handlers are reset by exec, ignored signals would be inherited.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    code = guard(broker_pid, argv, watch=exit_watch(), ignore_sigpipe=ignore_sigpipe)
    return exit_like(code)


if __name__ == "__main__":
    sys.exit(main())
