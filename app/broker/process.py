"""A broker child process started by this app: spawn, drain its stderr, stop it by its PID."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from typing import TypedDict

from app.broker.launch import BrokerLaunch
from backend.common.tasks import TaskSet

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0
_TAIL_BYTES = 8192
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000


class SpawnFlags(TypedDict, total=False):
    """The keywords of a broker's spawn that differ by OS (POSIX refuses ``creationflags``)."""

    start_new_session: bool
    creationflags: int


def broker_spawn_options(sys_platform: str = sys.platform) -> SpawnFlags:
    """Ctrl+C in a terminal goes to the app alone, which then stops the broker in order (if
    the app dies, the broker still sees EOF on stdin and shuts down): POSIX gives the broker its
    own session, which on Linux is also a scheduling autogroup that the broker's worker and
    engines share (``backend/core/lifetime/posix.py``): all of PAIR is one group beside the
    desktop's; Windows its own process group and no console window, which a windowed app's
    console child would otherwise open."""
    if sys_platform == "win32":
        return SpawnFlags(creationflags=CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW)
    return SpawnFlags(start_new_session=True)


def _echo_to_stderr(chunk: bytes) -> None:
    # The broker logs to stderr; pass it on so a terminal user still sees it (no-op for pythonw).
    stream = sys.stderr
    if stream is not None:
        stream.write(chunk.decode("utf-8", "replace"))
        stream.flush()


class OwnedBroker:
    """One broker process this app spawned. Owns the process and the task draining its stderr.

    stdin and stdout are the JSON-RPC channel (see ``BrokerSession``); stderr carries logs,
    of which the last few KiB are kept to explain a failed start.
    """

    def __init__(
        self, process: asyncio.subprocess.Process, echo: Callable[[bytes], None] | None
    ) -> None:
        self.process = process
        self.asked_to_stop = False
        self._echo = echo
        self._tail = bytearray()
        self._tasks = TaskSet(f"broker-{process.pid}")
        self._drain: asyncio.Task[None] | None = None
        if process.stderr is not None:
            self._drain = self._tasks.spawn(self._drain_stderr(process.stderr), name="stderr")

    @classmethod
    async def spawn(
        cls, launch: BrokerLaunch, echo: Callable[[bytes], None] | None = _echo_to_stderr
    ) -> OwnedBroker:
        """Start ``launch.command()`` with piped stdio; raises OSError when it cannot start."""
        process = await asyncio.create_subprocess_exec(
            *launch.command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            **broker_spawn_options(),
        )
        log.info("started broker pid %d", process.pid)
        return cls(process, echo)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    @property
    def last_message(self) -> str:
        """The last non-empty line the broker wrote to stderr (why it failed, usually)."""
        lines = bytes(self._tail).decode("utf-8", "replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    async def wait(self) -> int:
        """Wait for the process to exit (and its stderr to be drained); return its exit code."""
        returncode = await self.process.wait()
        if self._drain is not None:
            # Workers of a killed broker may hold the pipe a moment longer: do not wait for them.
            await asyncio.wait([self._drain], timeout=1.0)
        await self._tasks.close(timeout=1.0)
        return returncode

    async def stop(self, grace: float = STOP_GRACE_S) -> int:
        """Close stdin (EOF means shut down), wait ``grace`` seconds, then kill this PID only."""
        self.asked_to_stop = True
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            async with asyncio.timeout(grace):
                return await self.wait()
        except TimeoutError:
            log.warning("broker pid %d did not exit within %.1f s; killing it", self.pid, grace)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        return await self.wait()

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(4096):
            self._tail += chunk
            del self._tail[:-_TAIL_BYTES]
            if self._echo is not None:
                self._echo(chunk)
