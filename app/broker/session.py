"""One live JSON-RPC connection to a broker: over an owned child's stdio or a control socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from app.broker.process import OwnedBroker
from app.broker.state import Ending, Ownership, classify_exit
from app.tasks import TaskSet, wait_first
from backend.protocol import methods
from backend.protocol.endpoint import open_control_connection
from backend.protocol.errors import RpcError
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0
SHUTDOWN_CALL_TIMEOUT_S = 2.0
# An owned broker whose stdout closed should exit at once; past this it is killed.
EXIT_AFTER_EOF_S = 3.0

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
        self.peer = RpcPeer(
            reader,
            writer,
            name=f"broker-{self.pid or 'socket'}",
            on_notification=lambda method, params, _peer: sink(self, method, params),
        )
        self._tasks = TaskSet("broker-session")
        self._run = self._tasks.spawn(self.peer.run(), name="peer")

    @classmethod
    def over_process(cls, process: OwnedBroker, sink: SessionSink) -> BrokerSession:
        """A session over an owned child's stdout (frames in) and stdin (frames out)."""
        stdout, stdin = process.process.stdout, process.process.stdin
        assert stdout is not None, "spawned with a piped stdout"
        assert stdin is not None, "spawned with a piped stdin"
        return cls(stdout, stdin, sink, process)

    @classmethod
    async def attach(cls, address: str, sink: SessionSink) -> BrokerSession | None:
        """Connect to a running broker's control socket and ping it; None if nobody answers."""
        try:
            reader, writer = await open_control_connection(address)
        except OSError:
            return None
        session = cls(reader, writer, sink)
        try:
            await session.peer.call(methods.PING, timeout=PING_TIMEOUT_S)
        except RpcError as exc:
            log.info("broker at %s did not answer ping: %s", address, exc)
            await session.close()
            return None
        return session

    @property
    def ownership(self) -> Ownership:
        """Owned when this app spawned the broker."""
        return Ownership.ATTACHED if self.process is None else Ownership.OWNED

    async def call(self, method: str, params: Any = None, timeout: float = 10.0) -> Any:
        """One RPC on this session."""
        return await self.peer.call(method, params, timeout=timeout)

    @property
    def last_message(self) -> str:
        """An owned broker's last stderr line; empty for an attached one."""
        return self.process.last_message if self.process is not None else ""

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
                await self.peer.call(methods.SHUTDOWN, timeout=SHUTDOWN_CALL_TIMEOUT_S)
            await self.process.stop()
        self.peer.close()
        await asyncio.wait([self._run], timeout=2.0)
        await self._tasks.close(timeout=1.0)

    async def _reap_after_eof(self, process: OwnedBroker) -> None:
        try:
            async with asyncio.timeout(EXIT_AFTER_EOF_S):
                await process.process.wait()
        except TimeoutError:
            log.warning("broker pid %d closed stdout but kept running; killing it", process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.process.kill()
