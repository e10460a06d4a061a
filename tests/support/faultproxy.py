"""A TCP fault proxy for tests: it sits between a client and an upstream and breaks the link.

Put it between a front door and an engine (plain HTTP) or between a node's door and a peer's
relay (mutual TLS passes through untouched: the proxy only moves bytes). Each connection takes
the proxy's ``Fault`` when it is accepted, so ``set_fault`` between two requests changes what
the next connection gets; ``sever`` closes the connections already open (a client's pooled,
kept-alive connection would otherwise keep the old fault).

Faults (``Fault``): forward (optionally after a per-connection delay and with a delay before
each chunk), drop (FIN before any byte), reset (RST, by ``SO_LINGER`` 0), reset or stall after
the first N bytes of the answer (a stall forwards nothing more either way and keeps both
connections open), black hole (accept, never read, never answer, never dial the upstream), and
a canned answer instead of the upstream's (an engine answering busy, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

Action = Literal["forward", "drop", "reset", "stall", "blackhole", "respond"]
READ_SIZE = 64 * 1024
# An RST discards what the client's kernel holds unread: a reset after some bytes of the answer
# gives the client this long to read them first, or on a busy machine it may never see them
# (and the "cut after the first byte" a test means would be a failure before the answer).
RESET_GRACE_S = 1.0
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Fault:
    """What a connection accepted from now on gets.

    ``after_bytes`` (``reset`` and ``stall``) counts the bytes of the answer (upstream to client)
    forwarded first on that connection, from its start; ``reset`` with 0 resets at accept,
    before the upstream is even dialled. ``delay_s`` holds the connection (its bytes wait in the
    kernel) before the upstream is dialled; ``chunk_delay_s`` comes before each forwarded chunk,
    either way.
    """

    action: Action = "forward"
    after_bytes: int = 0
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    answer: bytes = b""
    boundary: bytes = b""
    # Cut after the whole chunk that reaches ``after_bytes`` (as read from the upstream), not
    # inside it: a TLS record cut in two is never decrypted, so a cut after the first record
    # of an answer must fall between records.
    whole_chunks: bool = False

    @classmethod
    def forward(cls, *, delay_s: float = 0.0, chunk_delay_s: float = 0.0) -> Fault:
        """Pass every byte both ways (late, when asked)."""
        return cls("forward", delay_s=delay_s, chunk_delay_s=chunk_delay_s)

    @classmethod
    def drop(cls) -> Fault:
        """Close (FIN) as soon as the connection is accepted, before any byte."""
        return cls("drop")

    @classmethod
    def reset(cls, *, after_bytes: int = 0, boundary: bytes = b"") -> Fault:
        """Reset (RST) the client's connection, at once or after ``after_bytes`` of the answer
        (then, with ``boundary``, just after its next occurrence in a chunk; the reset comes
        ``RESET_GRACE_S`` after those bytes, for the client to have read them)."""
        return cls("reset", after_bytes=after_bytes, boundary=boundary)

    @classmethod
    def stall(cls, *, after_bytes: int = 0, boundary: bytes = b"") -> Fault:
        """Forward ``after_bytes`` of the answer (with ``boundary``: up to just after its next
        occurrence), then nothing either way; both stay open."""
        return cls("stall", after_bytes=after_bytes, boundary=boundary)

    @classmethod
    def blackhole(cls) -> Fault:
        """Accept, then never read, never answer and never dial the upstream."""
        return cls("blackhole")

    @classmethod
    def respond(cls, answer: bytes) -> Fault:
        """Answer the first bytes the client sends with ``answer`` (see ``http_response``),
        then close; the upstream is never dialled."""
        return cls("respond", answer=answer)


def http_response(
    status: int, reason: str, body: bytes, content_type: str = "application/json"
) -> bytes:
    """A whole HTTP/1.1 response that closes its connection, for ``Fault.respond``."""
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


@dataclass(eq=False)
class Link:
    """One accepted connection: its fault, the bytes it moved, and whether it is over."""

    number: int
    fault: Fault
    sent_up: int = 0
    sent_down: int = 0
    faulted: bool = False
    closed: bool = False
    client: asyncio.StreamWriter | None = field(default=None, repr=False)
    upstream: asyncio.StreamWriter | None = field(default=None, repr=False)
    severed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def abort(self) -> None:
        """Close both sides at once, without flushing."""
        self.severed.set()
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class FaultProxy:
    """Listens on a free loopback port and forwards each connection to ``upstream`` under the
    current ``Fault``. Owns its listening socket, one task per connection, and their sockets;
    ``aclose`` (or leaving ``async with``) ends them all."""

    def __init__(self, upstream_host: str, upstream_port: int, *, fault: Fault | None = None):
        self._upstream = (upstream_host, upstream_port)
        self.fault = fault or Fault()
        self.links: list[Link] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def to_url(cls, url: str, *, fault: Fault | None = None) -> FaultProxy:
        """A proxy in front of the host and port of ``url`` (``scheme://host:port[/...]``)."""
        authority = url.split("://", 1)[1].split("/", 1)[0]
        host, _, port = authority.rpartition(":")
        return cls(host.strip("[]"), int(port), fault=fault)

    async def start(self) -> FaultProxy:
        """Start listening (on ``port``, picked by the kernel)."""
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return self

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, scheme: str = "http") -> str:
        """Its address as a base URL (``https`` in front of a relay)."""
        return f"{scheme}://127.0.0.1:{self.port}"

    def set_fault(self, fault: Fault) -> None:
        """The fault of every connection accepted from now on."""
        self.fault = fault

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        return len(self.links)

    @property
    def open(self) -> int:
        """Connections still open."""
        return sum(not link.closed for link in self.links)

    def sever(self) -> None:
        """Abort every open connection (the next request dials again and gets the new fault)."""
        for link in self.links:
            if not link.closed:
                link.abort()

    async def aclose(self) -> None:
        """Stop listening, abort every connection and wait for their tasks."""
        if self._server is not None:
            self._server.close()
        self.sever()  # every wait of a link's task ends when its link is severed
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=CLOSE_TIMEOUT_S)
            for task in late:  # dialling an upstream that does not answer, say
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # asyncio runs this callback as a task of its own: keep it so aclose can end it.
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        link = Link(len(self.links) + 1, self.fault, client=writer)
        self.links.append(link)
        try:
            await self._serve(link, reader, writer)
        except (OSError, asyncio.CancelledError):
            # Nobody awaits this task (asyncio's stream server made it) and only aclose
            # cancels it: the link's end is its outcome.
            link.abort()
        finally:
            link.closed = True
            for side in (link.client, link.upstream):
                if side is not None and not side.transport.is_closing():
                    side.transport.abort()
            self._tasks.discard(task)

    async def _serve(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        fault = link.fault
        if fault.action == "drop":
            link.faulted = True
            # A FIN now, whatever the client sent (closing with unread bytes would be an RST).
            writer.write_eof()
            await _drain_until_closed(reader, link)
            writer.close()
            return
        if fault.action == "reset" and fault.after_bytes <= 0:
            link.faulted = True
            _reset(writer)
            return
        if fault.action == "respond":
            link.faulted = True
            await reader.read(READ_SIZE)  # the request has begun
            await _send(link, writer, fault.answer)
            writer.write_eof()
            await _drain_until_closed(reader, link)
            writer.close()
            return
        if fault.action == "blackhole":
            link.faulted = True
            transport = writer.transport
            assert isinstance(transport, asyncio.Transport)  # a socket's: reads and writes
            transport.pause_reading()
            await link.severed.wait()  # a client that hangs up goes unnoticed: nothing is read
            return
        if await _severed_within(link, fault.delay_s):
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            _reset(writer)  # as a refused connection looks from behind a proxy
            return
        link.upstream = up_writer
        await self._pump_both(link, reader, writer, up_reader, up_writer)

    async def _pump_both(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        # Either direction ending (EOF, reset, the fault) ends the link.
        async with asyncio.TaskGroup() as group:
            up = group.create_task(self._pump_up(link, reader, up_writer), name="fault:up")
            down = group.create_task(self._pump_down(link, up_reader, writer), name="fault:down")
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
            up.cancel()
            down.cancel()
        if link.faulted and link.fault.action == "stall":
            await _drain_until_closed(reader, link)  # nothing forwarded, both still open
        for side in (writer, up_writer):
            side.close()
        for side in (writer, up_writer):
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await side.wait_closed()

    async def _pump_up(
        self, link: Link, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(READ_SIZE):
                await asyncio.sleep(link.fault.chunk_delay_s)
                up_writer.write(data)
                await up_writer.drain()
                link.sent_up += len(data)

    async def _pump_down(
        self, link: Link, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        fault = link.fault
        limited = fault.action in ("stall", "reset")
        with contextlib.suppress(OSError):
            while data := await up_reader.read(READ_SIZE):
                await asyncio.sleep(fault.chunk_delay_s)
                cut = _cut(fault, data, fault.after_bytes - link.sent_down) if limited else None
                if cut is not None:
                    await _send(link, writer, data[:cut])
                    link.faulted = True
                    if fault.action == "reset":
                        if cut > 0:
                            await _severed_within(link, RESET_GRACE_S)
                        _reset(writer)
                    return
                await _send(link, writer, data)


def _cut(fault: Fault, data: bytes, room: int) -> int | None:
    """Where in ``data`` the fault strikes (None: forward it all), ``room`` bytes before the
    limit; with a boundary, just after its first occurrence from there."""
    if len(data) < room:
        return None
    if fault.whole_chunks:
        return len(data)
    if not fault.boundary:
        return max(room, 0)
    found = data.find(fault.boundary, max(room, 0))
    return None if found < 0 else found + len(fault.boundary)


async def _severed_within(link: Link, seconds: float) -> bool:
    """Wait ``seconds``; whether the link was severed meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await link.severed.wait()
    return link.severed.is_set()


async def _send(link: Link, writer: asyncio.StreamWriter, data: bytes) -> None:
    if data:
        writer.write(data)
        await writer.drain()
        link.sent_down += len(data)


async def _drain_until_closed(reader: asyncio.StreamReader, link: Link) -> None:
    """Read (and drop) what the client sends until it hangs up or the link is severed."""
    with contextlib.suppress(OSError):
        while not link.severed.is_set() and await reader.read(READ_SIZE):
            pass


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN: linger on, for zero seconds."""
    sock = writer.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
