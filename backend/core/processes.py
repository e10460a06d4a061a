"""Child processes that never outlive the broker and are only ever killed by their own PID."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable

from backend.core.lifetime.posix import posix_preexec

log = logging.getLogger(__name__)


def child_preexec(*, ignore_sigpipe: bool = False) -> Callable[[], None] | None:
    """On Linux: the child gets SIGKILL when the broker thread that spawned it dies.
    ``ignore_sigpipe`` (POSIX): a write to a peer that hung up fails with EPIPE in the child
    instead of killing it (the disposition survives exec; subprocess resets it first).
    ``backend.core.lifetime`` has the whole per-OS story; this is its POSIX preexec alone."""
    if sys.platform == "win32":
        return None
    linux = sys.platform.startswith("linux")
    return posix_preexec(parent_death=linux, ignore_sigpipe=ignore_sigpipe)


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
