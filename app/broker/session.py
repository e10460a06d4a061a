"""One live JSON-RPC connection to a broker: over an owned child's stdio or a control socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from app.broker.process import OwnedBroker
from app.broker.state import Ending, Ownership, classify_exit, describe_exit
from backend.common.tasks import TaskSet, wait_first
from backend.protocol import contract, methods
from backend.protocol.contract import Method
from backend.protocol.endpoint import open_control_connection
from backend.protocol.errors import BadResult, RpcError
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 60.0
SHUTDOWN_CALL_TIMEOUT_S = 2.0
# An owned broker whose stdout closed should exit at once; past this it is killed.
EXIT_AFTER_EOF_S = 3.0

P = TypeVar("P")
R = TypeVar("R")

SessionSink = Callable[["BrokerSession", str, Any], None]


class BrokerSession:
    """A connection to one broker. Owns the peer's run task and, if owned, the broker process."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sink: SessionSink,
        process: OwnedBroker | None = None,
    ) -> None:
        self.process = process
        self.pid: int | None = process.pid if process is not None else None
        self.announced_ready = False
        self.closing = False
        self.ending = Ending.CLOSED
        self.startup_timed_out = False
        self._sink = sink
        self.peer = RpcPeer(
            reader,
            writer,
            name=f"broker-{self.pid or 'socket'}",
            on_notification=lambda method, params, _peer: self._on_push(method, params),
        )
        self._tasks = TaskSet("broker-session")
        self._run = self._tasks.spawn(self.peer.run(), name="peer")

    @classmethod
    def over_process(
        cls, process: OwnedBroker, sink: SessionSink, startup_timeout: float = STARTUP_TIMEOUT_S
    ) -> BrokerSession:
        """A session over an owned child's stdout (frames in) and stdin (frames out).

        A broker that does not announce ``app:ready`` within ``startup_timeout`` is killed,
        which the connection then treats like any other crash.
        """
        stdout, stdin = process.process.stdout, process.process.stdin
        assert stdout is not None, "spawned with a piped stdout"
        assert stdin is not None, "spawned with a piped stdin"
        session = cls(stdout, stdin, sink, process)
        session._tasks.spawn(session._watch_startup(startup_timeout), name="startup-watchdog")
        return session

    @classmethod
    async def attach(cls, address: str, sink: SessionSink) -> BrokerSession | None:
        """Connect to a running broker's control socket and ping it; None if nobody answers."""
        try:
            reader, writer = await open_control_connection(address)
        except OSError:
            return None
        session = cls(reader, writer, sink)
        try:
            await session.call(methods.PING, timeout=PING_TIMEOUT_S)
            # The broker's PID, even when its app:ready greeting has not come yet.
            status = await session.call(methods.STATUS, timeout=PING_TIMEOUT_S)
            if session.pid is None:
                session.pid = status.pid
        except RpcError as exc:
            log.info("broker at %s did not answer ping: %s", address, exc)
            await session.close()
            return None
        return session

    @property
    def ownership(self) -> Ownership:
        """Owned when this app spawned the broker."""
        return Ownership.ATTACHED if self.process is None else Ownership.OWNED

    async def call(self, method: Method[P, R], params: P | None = None, timeout: float = 10.0) -> R:
        """One typed RPC on this session; a result of the wrong shape raises ``BadResult``."""
        return await contract.call(self.peer, method, params, timeout=timeout)

    def describe_end(self) -> str:
        """Why the session ended, for the user: how an owned broker exited, or a lost link."""
        process = self.process
        if process is None:
            return "The connection to the service closed."
        if self.startup_timed_out:
            return f"The service (PID {process.pid}) did not get ready in time and was stopped."
        returncode = process.process.returncode
        if returncode is None:
            return f"The service (PID {process.pid}) stopped answering."
        return describe_exit(process.pid, returncode, process.last_message)

    async def wait_ended(self) -> None:
        """Wait until the broker is gone (owned: its process exited); ``ending`` says why."""
        if self.process is None:
            await self.peer.wait_closed()
            self.ending = Ending.CLOSED if self.closing else Ending.LOST
            return
        exit_wait = self.process.process.wait()
        if await wait_first(exit_wait, self.peer.wait_closed()) == 1:
            await self._reap_after_eof(self.process)
        returncode = await self.process.wait()
        log.info("broker pid %s exited with %d", self.pid, returncode)
        self.ending = classify_exit(returncode, asked_to_stop=self.process.asked_to_stop)

    async def close(self) -> None:
        """Leave: shut an owned broker down (bounded), only disconnect from an attached one."""
        self.closing = True
        if self.process is not None and self.process.process.returncode is None:
            with contextlib.suppress(RpcError):
                await self.call(methods.SHUTDOWN, timeout=SHUTDOWN_CALL_TIMEOUT_S)
            await self.process.stop()
        self.peer.close()
        await asyncio.wait([self._run], timeout=2.0)
        await self._tasks.close(timeout=1.0)

    async def _watch_startup(self, timeout: float) -> None:
        await asyncio.sleep(timeout)
        process = self.process
        if process is None or self.announced_ready or process.process.returncode is not None:
            return
        log.warning("broker pid %d not ready after %.0f s; killing it", process.pid, timeout)
        self.startup_timed_out = True
        with contextlib.suppress(ProcessLookupError):
            process.process.kill()

    def _on_push(self, method: str, params: Any) -> None:
        # app:ready may arrive before the ping answer, while the session is not adopted yet.
        if method == methods.APP_READY.name:
            try:
                self.pid = methods.APP_READY.decode(params).pid
            except BadResult as exc:
                log.warning("%s", exc)
        self._sink(self, method, params)

    async def _reap_after_eof(self, process: OwnedBroker) -> None:
        try:
            async with asyncio.timeout(EXIT_AFTER_EOF_S):
                await process.process.wait()
        except TimeoutError:
            log.warning("broker pid %d closed stdout but kept running; killing it", process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.process.kill()
