"""Child processes that never outlive the broker and are only ever killed by their own PID."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def child_preexec(*, ignore_sigpipe: bool = False) -> Callable[[], None] | None:
    """On Linux: the child gets SIGKILL when the broker thread that spawned it dies.
    ``ignore_sigpipe`` (POSIX): a write to a peer that hung up fails with EPIPE in the child
    instead of killing it (the disposition survives exec; subprocess resets it first)."""
    linux = sys.platform.startswith("linux")
    if sys.platform == "win32" or not (linux or ignore_sigpipe):
        return None
    libc = ctypes.CDLL(None, use_errno=True) if linux else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if ignore_sigpipe:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    return preexec


async def stop_child(
    process: asyncio.subprocess.Process, *, grace: float, close_stdin: bool = True
) -> int:
    """End our child: stdin EOF, then SIGTERM, then SIGKILL, each after ``grace`` seconds."""
    if process.returncode is not None:
        return process.returncode
    if close_stdin and process.stdin is not None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.close()
        if await _exited_within(process, grace):
            return process.returncode or 0
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    if await _exited_within(process, grace):
        return process.returncode or 0
    log.warning("process %d ignored SIGTERM; killing it", process.pid)
    return await kill_child(process)


async def kill_child(process: asyncio.subprocess.Process) -> int:
    """SIGKILL our child and reap it."""
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    return await process.wait()


async def _exited_within(process: asyncio.subprocess.Process, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await process.wait()
    except TimeoutError:
        return False
    return True


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python process of ours: unbuffered, same interpreter path."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env
