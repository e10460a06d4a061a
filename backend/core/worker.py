"""A worker: a supervised child process that speaks JSON-RPC on its stdio and answers heartbeats."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.lifetime import ChildLifetime, ChildTree, child_lifetime
from backend.core.paced_pipe import spawn_paced
from backend.core.processes import child_env, kill_child, stop_child
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)


class WorkerHung(Exception):
    """The worker stopped answering heartbeats and was killed."""


class WorkerExited(Exception):
    """The worker process exited on its own."""


class WorkerProcess(Component):
    """Owns one child process, its RPC peer, its stderr pump and its heartbeat loop.

    ``read_pace`` > 0: the child's stdout is read in bursts at most that many seconds apart
    (``paced_pipe``), for a worker whose notifications need not wake us one by one.
    Ready once the first heartbeat is answered, after ``on_started`` (given the worker once the
    child runs and its channel is open) has returned; an error there ends the run. A worker that
    answers no heartbeat for ``heartbeat_timeout`` seconds is killed (SIGKILL, by its own PID)
    and the run crashes, so the supervisor restarts it.

    The child is spawned with ``lifetime``'s options (Linux: parent-death signal and its own
    process group in our session; macOS: its own session, without the watchdog launcher,
    which would stand between us and the descriptors it inherits: the worker exits on stdin
    EOF when the broker dies; Windows: no console window) and adopted by it (Windows: a
    kill-on-close job object) until it has been reaped.
    """

    kind = "worker"
    ready_on_start = False

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        clock: Clock,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 15.0,
        stop_grace: float = 3.0,
        on_notification: Callable[[str, Any], None] = lambda method, params: None,
        on_request: Callable[[str, Any], Awaitable[Any]] | None = None,
        environment: Callable[[], dict[str, str]] = dict,
        pass_fds: Sequence[int] = (),
        read_pace: float = 0.0,
        on_started: Callable[[WorkerProcess], Awaitable[None]] | None = None,
        lifetime: ChildLifetime | None = None,
    ) -> None:
        super().__init__(name)
        self._argv = list(argv)
        self._clock = clock
        self._interval = heartbeat_interval
        self._timeout = heartbeat_timeout
        self._grace = stop_grace
        self._on_notification = on_notification
        self._on_request = on_request
        self._environment = environment
        self._pass_fds = tuple(pass_fds)
        self._read_pace = read_pace
        self._on_started = on_started
        self._lifetime = lifetime
        self._process: asyncio.subprocess.Process | None = None
        self._peer: RpcPeer | None = None

    def pid(self) -> int | None:
        """The current child's PID while it runs."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification to the worker if it runs."""
        if self._peer is not None:
            self._peer.notify(method, params)

    async def call(self, method: str, params: Any = None, *, timeout: float = 10.0) -> Any:
        """Call the worker; raises ``Unavailable`` when it is not running."""
        if self._peer is None or self._peer.closed:
            raise errors.Unavailable(f"{self.name} is not running")
        return await self._peer.call(method, params, timeout=timeout)

    async def run(self) -> None:
        """Spawn the worker and watch it until it exits, hangs or we are cancelled."""
        lifetime = self._lifetime or child_lifetime()
        process = await spawn_paced(
            self._argv,
            pace=self._read_pace,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_env(self._environment()),
            **spawn_keywords(lifetime, self._pass_fds),
        )
        tree = lifetime.adopt(process)
        self._process = process
        assert process.stdout is not None and process.stdin is not None
        peer = RpcPeer(
            process.stdout,
            process.stdin,
            name=f"worker:{self.name}",
            on_notification=self._relay,
            on_request=self._answer if self._on_request is not None else None,
        )
        self._peer = peer
        log.info("worker %s started (pid %d)", self.name, process.pid)
        try:
            await self._watch(process, peer)
        except ExceptionGroup as group:
            raise _first_leaf(group) from None
        finally:
            await asyncio.shield(self._reap(process, peer, tree))

    async def stop(self) -> None:
        """Ask the worker to exit (stdin EOF), then escalate; only our own PID is signalled."""
        process = self._process
        if process is not None:
            await stop_child(process, grace=self._grace)

    async def _watch(self, process: asyncio.subprocess.Process, peer: RpcPeer) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(peer.run(), name=f"worker:{self.name}:rpc")
            group.create_task(self._pump_stderr(process), name=f"worker:{self.name}:stderr")
            heartbeat = group.create_task(self._heartbeat(peer), name=f"worker:{self.name}:beat")
            code = await process.wait()
            heartbeat.cancel()
            peer.close()
            raise WorkerExited(f"exited with code {code}")

    async def _heartbeat(self, peer: RpcPeer) -> None:
        if self._on_started is not None:
            await self._on_started(self)
        last_answer = self._clock.monotonic()
        while True:
            try:
                await peer.call(methods.PING.name, timeout=self._interval)
                last_answer = self._clock.monotonic()
                self.announce_ready()
            except (errors.CallTimeout, errors.ConnectionLost):
                pass
            silent = self._clock.monotonic() - last_answer
            if silent >= self._timeout:
                log.error(
                    "worker %s answered no heartbeat for %.0f s; killing it", self.name, silent
                )
                raise WorkerHung(f"no heartbeat answer for {silent:.0f} s")
            await self._clock.sleep(self._interval)

    async def _pump_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            log.info("[%s] %s", self.name, line.decode(errors="replace").rstrip())

    async def _reap(
        self, process: asyncio.subprocess.Process, peer: RpcPeer, tree: ChildTree
    ) -> None:
        try:
            if process.returncode is None:
                await kill_child(process)
        finally:
            tree.release()
        peer.close()
        self._peer = None

    def _relay(self, method: str, params: Any, _: RpcPeer) -> None:
        self._on_notification(method, params)

    async def _answer(self, method: str, params: Any, _: RpcPeer) -> Any:
        """A request from the worker (only workers built with ``on_request`` may ask)."""
        if self._on_request is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        return await self._on_request(method, params)


def spawn_keywords(lifetime: ChildLifetime, pass_fds: Sequence[int]) -> dict[str, Any]:
    """The spawn's keywords: ``lifetime``'s options and, only where there are any, the
    descriptors to inherit (Windows refuses ``pass_fds`` outright)."""
    keywords: dict[str, Any] = dict(lifetime.spawn_options())
    if pass_fds:
        keywords["pass_fds"] = tuple(pass_fds)
    return keywords


def _first_leaf(group: BaseExceptionGroup[Exception]) -> Exception:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
