"""A message channel between two of PAIR's processes that can carry descriptors
(``SCM_RIGHTS``): a Unix socket pair, one message per datagram, never blocking the event loop.

Messages the kernel cannot take now wait in order in an outbox (their descriptors duplicated,
so the sender may close its own) and go as soon as the socket is writable (or, after macOS's
ENOBUFS for a full receiver, shortly); ``flushed()`` waits for that. A receiver reads whole
messages on its loop, or ``drain()``s what is left at once after the other process is gone
(the kernel keeps what it had already sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_MESSAGE = 4096
MAX_FDS = 4
# The kernel caps it (net.core.wmem_max); a burst of queued requests fits in the default.
SEND_BUFFER = 4 * 1024 * 1024
# macOS answers a full receiver of a local datagram with ENOBUFS, and no writable event
# follows: the outbox is tried again after this long instead.
NO_BUFFER_RETRY_S = 0.01

OnMessage = Callable[[bytes, list[int]], None]


def channel_pair(
    make: Callable[[int, int], tuple[socket.socket, socket.socket]] | None = None,
) -> tuple[socket.socket, socket.socket] | None:
    """Two connected ends (sequenced packets where the system has them, else datagrams), or
    None where descriptors cannot be passed (Windows) or a whole message cannot (a datagram
    pair whose send buffer stays under ``MAX_MESSAGE``: macOS caps a local datagram at the
    sender's buffer, 2048 bytes by default). ``make`` is ``socket.socketpair(family, kind)``."""
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return None
    make = make or socket.socketpair
    for kind in (getattr(socket, "SOCK_SEQPACKET", None), socket.SOCK_DGRAM):
        if kind is None:
            continue
        try:
            ends = make(socket.AF_UNIX, kind)
        except OSError:
            continue
        for end in ends:
            for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                with contextlib.suppress(OSError):
                    end.setsockopt(socket.SOL_SOCKET, option, SEND_BUFFER)
        if kind == socket.SOCK_DGRAM and not all(_fits(end) for end in ends):
            log.warning(
                "a local datagram here cannot carry %d bytes; requests waiting in the proxy "
                "worker are not kept with the broker across a worker crash",
                MAX_MESSAGE,
            )
            for end in ends:
                end.close()
            return None
        return ends
    return None


def _fits(end: socket.socket) -> bool:
    """Whether ``end``'s send and receive buffers each take a whole message (a local datagram's
    limit on BSDs)."""
    try:
        return all(
            end.getsockopt(socket.SOL_SOCKET, option) >= MAX_MESSAGE
            for option in (socket.SO_SNDBUF, socket.SO_RCVBUF)
        )
    except OSError:
        return False


class FdChannel:
    """One end of a pair. ``on_message`` gets each message and the descriptors that came with
    it, which it then owns (it must close them)."""

    def __init__(self, sock: socket.socket, on_message: OnMessage | None = None) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._on_message = on_message
        self._outbox: deque[tuple[bytes, list[int]]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flushed: asyncio.Event | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether this end was closed (or the other end went away)."""
        return self._closed

    @property
    def backed_up(self) -> bool:
        """Whether messages wait for the kernel to take them."""
        return bool(self._outbox)

    def start(self) -> None:
        """Read messages on the running loop (a sending-only end need not start)."""
        self._loop = asyncio.get_running_loop()
        if self._on_message is not None:
            self._loop.add_reader(self._sock.fileno(), self._read)

    def try_send(self, payload: bytes, fds: list[int]) -> bool:
        """Send now if nothing waits and the kernel takes it; whether it was sent."""
        if self._closed or self._outbox:
            return False
        try:
            socket.send_fds(self._sock, [payload], fds)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                self._fail(exc)
            return False
        return True

    def send(self, payload: bytes, fds: list[int] | None = None) -> None:
        """Send in order: now if possible, else from the outbox (the descriptors duplicated)."""
        fds = fds or []
        if self._closed or self.try_send(payload, fds):
            return
        self._outbox.append((payload, [os.dup(fd) for fd in fds]))
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if len(self._outbox) == 1:
            self._loop.add_writer(self._sock.fileno(), self._flush)

    async def flushed(self) -> None:
        """Wait until the outbox is empty (at once when it is, or the channel is closed)."""
        while self._outbox and not self._closed:
            if self._flushed is None:
                self._flushed = asyncio.Event()
            await self._flushed.wait()

    def drain(self) -> None:
        """Read every message already waiting, now (the other process may be gone)."""
        if not self._closed:
            self._read()

    def close(self) -> None:
        """Close this end; messages still in the outbox are dropped."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._sock.fileno())
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_writer(self._sock.fileno())
        for _, fds in self._outbox:
            _close_all(fds)
        self._outbox.clear()
        self._sock.close()
        self._wake()

    def _flush(self) -> None:
        while self._outbox:
            payload, fds = self._outbox[0]
            try:
                socket.send_fds(self._sock, [payload], fds)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self._retry_later()
                else:
                    self._fail(exc)
                return
            self._outbox.popleft()
            _close_all(fds)
        if self._loop is not None:
            self._loop.remove_writer(self._sock.fileno())
        self._wake()

    def _retry_later(self) -> None:
        """Stop waiting for a writable event (one comes at once, again and again) and try the
        outbox again shortly."""
        loop = self._loop
        if loop is None:
            return
        loop.remove_writer(self._sock.fileno())

        def again() -> None:
            if not self._closed and self._outbox:
                loop.add_writer(self._sock.fileno(), self._flush)

        loop.call_later(NO_BUFFER_RETRY_S, again)

    def _read(self) -> None:
        while not self._closed:
            try:
                message, fds, flags, _ = socket.recv_fds(self._sock, MAX_MESSAGE, MAX_FDS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fail(exc)
                return
            if not message and not fds:
                self.close()  # the other end closed (sequenced packets say so)
                return
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                log.error("dropping a message cut short on the descriptor channel")
                _close_all(fds)
                continue
            if self._on_message is None:
                _close_all(fds)
                continue
            self._on_message(message, fds)

    def _fail(self, exc: OSError) -> None:
        log.info("descriptor channel closed: %s", exc)
        self.close()

    def _wake(self) -> None:
        if self._flushed is not None:
            self._flushed.set()
            self._flushed = None


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
