"""aiohttp sites that hold the network's connections to ``ConnectionLimits``.

``GuardedSite`` serves a runner on a listening socket like aiohttp's ``SockSite``, with each
connection's protocol wrapped in a ``GuardedConnection``: past a cap it is closed at once, and
one whose first request head (up to its blank line) has not arrived within the deadline is
closed then (exempt peers included: a connection that sends nothing is nobody's).

The deadlines take one timer per guard, not one per connection: they are noted in arrival
order (the timeout is the same for all) and the timer, set for the oldest, closes the overdue
and moves on, at most once a second. Later requests on a kept-alive connection are bounded by
aiohttp's own idle timer (the runner's ``keepalive_timeout``, which also closes a half-sent
head). On a TLS site the handshake gets the same deadline. Refusals and deadlines are logged as
one counted line per interval each.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import deque
from typing import cast

from aiohttp import web

from backend.common.connection_limits import ConnectionCounter, ConnectionLimits, Refusal
from backend.core.loop_errors import CountedLine

# A head ends with an empty line: CRLF CRLF, or the bare LF LF that lenient parsers take.
HEAD_ENDS = (b"\n\r\n", b"\n\n")
_SLACK_S = 0.001  # the loop may fire a hair early
# The sweep runs at most this often: a deadline may be kept this much late, and a steady
# stream of connections costs one timer a second, not one each.
SWEEP_EVERY_S = 1.0


class ConnectionGuard:
    """One listener's caps (a ``ConnectionCounter``, which listeners may share) and head
    deadlines; ``name`` names the listener in its log lines."""

    def __init__(self, name: str, counter: ConnectionCounter, into: logging.Logger) -> None:
        self.name = name
        self.counter = counter
        self._into = into
        self._waiting: deque[GuardedConnection] = deque()  # by deadline, oldest first
        self._timer: asyncio.TimerHandle | None = None
        self._last_refusal: tuple[str, Refusal] = ("", "total")
        self._refused = CountedLine(self._write_refused)
        self._overdue = CountedLine(self._write_overdue)

    @property
    def limits(self) -> ConnectionLimits:
        """The caps and deadlines in force."""
        return self.counter.limits

    def wrap(self, inner: asyncio.Protocol) -> GuardedConnection:
        """A new connection's protocol: ``inner`` (aiohttp's handler) behind this guard."""
        return GuardedConnection(self, inner)

    def refused(self, loop: asyncio.AbstractEventLoop, peer: str, refusal: Refusal) -> None:
        """Count a connection closed at a cap."""
        self._last_refusal = (peer, refusal)
        self._refused.note(loop)

    def watch(self, loop: asyncio.AbstractEventLoop, connection: GuardedConnection) -> None:
        """Start ``connection``'s head deadline."""
        connection.deadline = loop.time() + self.limits.head_timeout_s
        self._waiting.append(connection)
        if self._timer is None:
            self._timer = loop.call_at(connection.deadline, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + _SLACK_S
        waiting = self._waiting
        while waiting and waiting[0].deadline <= now:
            connection = waiting.popleft()
            if connection.waiting_head:
                connection.close_overdue()
                self._overdue.note(loop)
        if waiting:
            at = max(waiting[0].deadline, now + SWEEP_EVERY_S)
            self._timer = loop.call_at(at, self._sweep, loop)

    def _write_refused(self, count: int) -> None:
        peer, refusal = self._last_refusal
        limits = self.limits
        cap = f"{limits.per_peer} from one address" if refusal == "per-address" else "in all"
        self._into.warning(
            "%s: closed %d connection(s) over the limit (%d in all, %d a peer address); "
            "the last from %s (over %s)",
            self.name,
            count,
            limits.total,
            limits.per_peer,
            peer,
            cap,
        )

    def _write_overdue(self, count: int) -> None:
        self._into.info(
            "%s: closed %d connection(s) that sent no complete request within %g s",
            self.name,
            count,
            self.limits.head_timeout_s,
        )


class GuardedConnection(asyncio.Protocol):
    """Passes a connection on to aiohttp's handler once the guard admits it; counts it until
    it closes and watches for its first request head."""

    __slots__ = ("_guard", "_inner", "_peer", "_tail", "_transport", "deadline", "waiting_head")

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner: asyncio.Protocol | None = inner
        self._peer: str | None = None  # set while counted
        self._tail = b""
        self._transport: asyncio.Transport | None = None
        self.deadline = 0.0
        self.waiting_head = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Admit or refuse; an admitted connection goes on to the handler."""
        # uvloop's transports are not asyncio's classes, only the same interface.
        transport = cast(asyncio.Transport, transport)
        peer = _peer_address(transport)
        guard, loop = self._guard, asyncio.get_running_loop()
        if not guard.limits.is_exempt(peer):
            refusal = guard.counter.admit(peer)
            if refusal is not None:
                self._inner = None
                transport.abort()
                guard.refused(loop, peer, refusal)
                return
            self._peer = peer
        self._transport = transport
        self.waiting_head = True
        guard.watch(loop, self)
        assert self._inner is not None
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        """Note the end of the first head; pass the bytes on."""
        if self.waiting_head:
            seen = self._tail + data if self._tail else data
            if HEAD_ENDS[0] in seen or HEAD_ENDS[1] in seen:
                self.waiting_head, self._tail = False, b""
            else:
                self._tail = seen[-2:]
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        """Pass it on."""
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        """Pass it on."""
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        """Pass it on."""
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop counting it; pass it on."""
        self.waiting_head = False
        if self._peer is not None:
            self._guard.counter.release(self._peer)
            self._peer = None
        # The guard may note this object until its deadline: keep nothing big alive meanwhile.
        inner, self._inner, self._transport = self._inner, None, None
        if inner is not None:
            inner.connection_lost(exc)

    def close_overdue(self) -> None:
        """The head did not come in time: drop the connection."""
        self.waiting_head = False
        if self._transport is not None:
            self._transport.abort()


class GuardedSite(web.SockSite):
    """aiohttp's ``SockSite`` with every connection behind ``guard`` (and a TLS handshake
    bounded by its head deadline)."""

    __slots__ = ("_guard",)

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        guard: ConnectionGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, sock, ssl_context=ssl_context)
        self._guard = guard

    async def start(self) -> None:
        """Listen; as ``SockSite.start`` with the guard's protocol."""
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        guard = self._guard
        handshake = guard.limits.head_timeout_s if self._ssl_context is not None else None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: guard.wrap(server()),
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=handshake,
        )


def _peer_address(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""
