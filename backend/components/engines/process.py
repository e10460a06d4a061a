"""Engine processes PAIR starts: their tree tied to the broker's life, output in a ring."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

import psutil

from backend.core.lifetime import ChildLifetime, ChildTree, Ending, child_lifetime

log = logging.getLogger(__name__)

LOG_LINES = 2000


class EngineLog:
    """The last lines an engine printed (stdout and stderr together)."""

    def __init__(self, limit: int = LOG_LINES) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=limit)

    def add(self, line: str) -> None:
        """Keep one line."""
        self._lines.append(line)

    def tail(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines (all kept lines when None)."""
        lines = list(self._lines)
        return lines if count is None else lines[-count:]


class RunningProcess(Protocol):
    """What a controller needs of an engine process it started (an ``EngineProcess``)."""

    @property
    def pid(self) -> int:
        """The process ID (also its process group's)."""
        ...

    @property
    def create_time(self) -> float:
        """When the OS started it, so a recycled PID is never mistaken for it."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited."""
        ...

    async def wait(self) -> int:
        """Wait for the exit (and the last output)."""
        ...

    async def stop(self, *, kill: bool = False, grace: float = 5.0) -> int:
        """Signal it, wait up to ``grace`` seconds, then kill what is left."""
        ...


class Spawn(Protocol):
    """Starts an engine process whose output goes to ``output`` (``EngineProcess.spawn``)."""

    async def __call__(
        self, argv: Sequence[str], env: dict[str, str], output: EngineLog
    ) -> RunningProcess: ...


class EngineProcess:
    """One running engine process and the task that pumps its output. Owned by its controller."""

    def __init__(
        self, process: asyncio.subprocess.Process, output: EngineLog, tree: ChildTree
    ) -> None:
        self._process = process
        self._tree = tree
        self.pid = process.pid
        self.create_time = _create_time(process.pid)
        self._pump = asyncio.get_running_loop().create_task(
            self._pump_output(output), name=f"engine-output:{process.pid}"
        )

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        env: dict[str, str],
        output: EngineLog,
        *,
        ignore_sigpipe: bool = False,
        lifetime: ChildLifetime | None = None,
    ) -> EngineProcess:
        """Start ``argv`` tied to our life (``backend.core.lifetime``: on Linux its own process
        group in our session, killed with us by the kernel); ``ignore_sigpipe``: it outlives a
        peer that hangs up while it writes."""
        lifetime = lifetime or child_lifetime()
        process = await asyncio.create_subprocess_exec(
            *lifetime.command(argv, ignore_sigpipe=ignore_sigpipe),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            **lifetime.spawn_options(ignore_sigpipe=ignore_sigpipe),
        )
        return cls(process, output, lifetime.adopt(process))

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited."""
        return self._process.returncode

    async def wait(self) -> int:
        """Wait for the exit, then for the last output. The tree is let go of at the exit (on
        Windows closing its job kills what the engine left behind; elsewhere a no-op)."""
        code = await self._process.wait()
        self._tree.release()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._pump), 2)
        return code

    async def stop(self, *, kill: bool = False, grace: float = 5.0) -> int:
        """Signal the whole tree (its process group, or its job on Windows), then kill what
        is left of it once the engine exited."""
        if self._process.returncode is None:
            self._tree.end(Ending.KILL if kill else Ending.TERMINATE)
            try:
                async with asyncio.timeout(grace):
                    await self._process.wait()
            except TimeoutError:
                log.warning("engine pid %d ignored SIGTERM for %.0f s; killing it", self.pid, grace)
                self._tree.end(Ending.KILL)
        code = await self.wait()
        self._tree.end(Ending.KILL)  # leftovers in the tree (helpers the engine started)
        self._tree.release()
        return code

    async def _pump_output(self, output: EngineLog) -> None:
        stream = self._process.stdout
        assert stream is not None
        while line := await stream.readline():
            output.add(line.decode(errors="replace").rstrip())


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def reap_orphan(pid: int, create_time: float, lifetime: ChildLifetime | None = None) -> bool:
    """Kill the tree of a previous broker's engine if ``pid`` is still that process.

    The start time must match too, so a recycled PID belonging to someone else is never touched.
    """
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - create_time) > 0.05:
            return False
    except psutil.Error:
        return False
    log.warning("stopping engine pid %d left running by a previous broker", pid)
    (lifetime or child_lifetime()).kill_orphan(pid)
    return True
