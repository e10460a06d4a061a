"""The worker's end of the custody channel (``backend/protocol/custody.py``): hold a waiting
front-door request with the broker, release it before it reaches an engine, and serve the
requests a killed predecessor left with the broker."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from backend.core.fd_channel import FdChannel
from backend.protocol import custody
from backend.protocol.custody import Held, Released
from backend.protocol.proxy import Door
from backend.workers.proxy.channels.jobs import Job

log = logging.getLogger(__name__)

# Held at once; past that a waiting request is served as before, only not kept over a crash.
MAX_HELD = 256
# Headers that described the body as it came; the copy is the decoded body with its length.
_BODY_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"content-encoding", b"expect"})

Replay = Callable[[Held, socket.socket, bytes], Coroutine[Any, Any, None]]


class Custody:
    """Holds and releases requests over ``sock`` (None: this worker has no custody channel,
    so nothing is held). ``start(replay)`` reads what the broker gives back."""

    def __init__(self, sock: socket.socket | None) -> None:
        self._channel = FdChannel(sock, self._on_message) if sock is not None else None
        self._numbers = itertools.count(1)
        self._held: set[int] = set()
        self._resumed: dict[asyncio.BaseTransport, Held] = {}
        self._replay: Replay | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, replay: Replay) -> None:
        """Serve given-back requests with ``replay`` from now on."""
        self._replay = replay
        if self._channel is not None:
            self._channel.start()

    def hold(self, request: web.Request, door: Door, body: bytes, job: Job) -> int | None:
        """Hold ``request`` (its decoded ``body``) with the broker; its number, or None when it
        cannot be held (no channel, TLS, too many, or the channel is backed up)."""
        channel = self._channel
        transport = request.transport
        if channel is None or transport is None or len(self._held) >= MAX_HELD:
            return None
        if transport.get_extra_info("sslcontext") is not None:
            return None
        conn = transport.get_extra_info("socket")
        if conn is None:
            return None
        number = next(self._numbers)
        record = Held(
            number=number,
            door=door,
            job=job.key,
            seq=job.seq,
            attempt=job.attempt,
            created_at=job.created_at,
        )
        try:
            copy = _memory_file(raw_request(request, body))
        except OSError as exc:
            log.warning("a waiting request could not be held: %s", exc)
            return None
        try:
            sent = channel.try_send(custody.encode(record), [conn.fileno(), copy])
        finally:
            os.close(copy)
        if not sent:
            return None
        self._held.add(number)
        return number

    def release(self, number: int) -> None:
        """The request left the queue: the broker lets go of it (sent in order)."""
        if number in self._held and self._channel is not None:
            self._held.discard(number)
            self._channel.send(custody.encode(Released(number=number)))

    async def released(self) -> None:
        """Wait until every release has reached the kernel (before a request goes upstream)."""
        if self._channel is not None:
            await self._channel.flushed()

    def resumed(self, transport: asyncio.BaseTransport | None) -> Held | None:
        """The held record of a given-back request arriving on ``transport`` (once)."""
        if transport is None or not self._resumed:
            return None
        return self._resumed.pop(transport, None)

    def expect(self, transport: asyncio.BaseTransport, record: Held) -> None:
        """``transport`` carries the given-back request of ``record``."""
        self._resumed[transport] = record

    def forget(self, transport: asyncio.BaseTransport) -> None:
        """The connection closed before its request was served."""
        self._resumed.pop(transport, None)

    def close(self) -> None:
        """Close the channel and stop serving given-back requests."""
        if self._channel is not None:
            self._channel.close()
        for task in self._tasks:
            task.cancel()

    def _on_message(self, data: bytes, fds: list[int]) -> None:
        try:
            message = custody.decode(data)
        except ValueError as exc:
            message = None
            log.error("ignoring a malformed custody message: %s", exc)
        if not isinstance(message, Held) or len(fds) != 2 or self._replay is None:
            _close_all(fds)
            return
        conn = socket.socket(fileno=fds[custody.CONNECTION])
        try:
            raw = _read_all(fds[custody.REQUEST])
        except OSError as exc:
            log.error("a request given back could not be read: %s", exc)
            conn.close()
            return
        finally:
            os.close(fds[custody.REQUEST])
        task = asyncio.get_running_loop().create_task(self._replay(message, conn, raw))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def raw_request(request: web.Request, body: bytes) -> bytes:
    """The request as HTTP/1.x bytes, with the decoded body and its length."""
    version = request.version
    lines = [f"{request.method} {request.raw_path} HTTP/{version.major}.{version.minor}".encode()]
    kept = [(k, v) for k, v in request.raw_headers if k.lower() not in _BODY_HEADERS]
    lines += [name + b": " + value for name, value in kept]
    lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class Primed(asyncio.Protocol):
    """Wraps a door's protocol for a given-back connection: the request the client already
    sent is fed to it first, then the connection goes on as any other."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        raw: bytes,
        on_made: Callable[[asyncio.BaseTransport], None],
        on_lost: Callable[[asyncio.BaseTransport], None],
    ) -> None:
        self._inner = inner
        self._raw = raw
        self._on_made = on_made
        self._on_lost = on_lost
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._on_made(transport)
        self._inner.connection_made(transport)
        self._inner.data_received(self._raw)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._on_lost(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def _memory_file(data: bytes) -> int:
    """A descriptor of an unnamed file holding ``data`` (in memory where the system can)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pair-held-request", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as spool:
            fd = os.dup(spool.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
