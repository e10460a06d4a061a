"""JSON-RPC over a WebSocket: the member link's transport.

The link runs on the node API's one TLS port (mutual TLS, pinned), so it needs no port of its
own; a WebSocket is the byte pipe, and the usual ``RpcPeer`` speaks newline-framed JSON-RPC
over it. Each side pings every ``HEARTBEAT_S`` (aiohttp answers them); a link on which
nothing (not even a pong) arrived for ``SILENCE_LIMIT_S`` is dead, as when the member vanished
without closing its connection (Wi-Fi gone, a route blackholed). The member's link is the one
sign of its liveness that the routing table follows, so it must notice that within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

import aiohttp

from backend.protocol.peer import NotificationHandler, RequestHandler, RpcPeer

log = logging.getLogger(__name__)

# A ping a second costs nothing on a LAN; three seconds without a word tolerate a loaded broker
# or a Wi-Fi hiccup of two seconds, and still take a dead member out of routing well within 5 s.
HEARTBEAT_S = 1.0
SILENCE_LIMIT_S = 3.0
# Closing politely waits for the other side's close frame: a dead link never sends one.
CLOSE_LIMIT_S = 1.0
# A member's answers and pushes are small (a job list of 1000 entries is ~0.5 MiB).
MAX_FRAME_BYTES = 4 * 1024 * 1024


class WebSocket(Protocol):
    """What both aiohttp WebSocket classes (server and client side) offer."""

    async def send_bytes(self, data: bytes) -> None:
        """Send one binary message."""

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
        """The next message (close and error messages included); ``TimeoutError`` after
        ``timeout`` seconds without one."""

    async def ping(self, message: bytes = b"") -> None:
        """Send a ping."""

    async def close(self) -> bool:
        """Close the WebSocket."""


class _Writer:
    """An ``RpcPeer``'s write side: what it writes between two drains goes as one message."""

    def __init__(self, socket: WebSocket) -> None:
        self._socket = socket
        self._buffer: list[bytes] = []
        self.transport = self

    def write(self, data: bytes) -> None:
        self._buffer.append(data)

    async def drain(self) -> None:
        data = b"".join(self._buffer)
        self._buffer.clear()
        if data:
            await self._socket.send_bytes(data)

    def close(self) -> None:
        """Nothing to do: ``serve`` closes the WebSocket once the peer has finished."""

    def abort(self) -> None:
        """The peer stops reading; ``serve`` then closes the WebSocket."""
        self._buffer.clear()


def peer_over(
    socket: WebSocket,
    *,
    name: str,
    on_request: RequestHandler | None = None,
    on_notification: NotificationHandler | None = None,
) -> tuple[RpcPeer, asyncio.StreamReader]:
    """An ``RpcPeer`` that reads and writes ``socket`` (run it with ``serve``)."""
    reader = asyncio.StreamReader(limit=MAX_FRAME_BYTES)
    peer = RpcPeer(
        reader,
        _Writer(socket),
        name=name,
        on_request=on_request,
        on_notification=on_notification,
        max_frame=MAX_FRAME_BYTES,
        max_in_flight=16,
        outbox_limit=2_000,
    )
    return peer, reader


async def serve(
    socket: WebSocket,
    peer: RpcPeer,
    reader: asyncio.StreamReader,
    *,
    on_lost: Callable[[str], None] | None = None,
) -> None:
    """Run ``peer`` until the WebSocket or the peer ends, then close the WebSocket.

    ``on_lost`` hears why at once, before the (bounded) close. aiohttp answers pings and reads
    pongs inside ``receive``, and each of them starts its wait afresh: a pong is a sign of life.
    """
    lost = ["the link was closed"]
    pump = asyncio.create_task(_pump(socket, reader, lost, peer.name), name=f"{peer.name}:pump")
    pinger = asyncio.create_task(_ping(socket), name=f"{peer.name}:ping")
    try:
        await peer.run()
    finally:
        if on_lost is not None:
            on_lost(lost[0])
        for task in (pinger, pump):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_LIMIT_S):
                await socket.close()


async def _pump(
    socket: WebSocket, reader: asyncio.StreamReader, lost: list[str], name: str
) -> None:
    try:
        while True:
            message = await socket.receive(SILENCE_LIMIT_S)
            kind = message.type
            if kind == aiohttp.WSMsgType.BINARY:
                reader.feed_data(message.data)
            elif kind == aiohttp.WSMsgType.TEXT:
                reader.feed_data(message.data.encode())
            else:  # close, closing, closed or error: the link is over
                return
    except TimeoutError:
        lost[0] = f"nothing was heard on the link for {SILENCE_LIMIT_S:g} s"
        log.warning("%s: %s; it is closed", name, lost[0])
    except (aiohttp.ClientError, ConnectionError) as exc:
        lost[0] = f"the link broke: {exc or type(exc).__name__}"
    finally:
        reader.feed_eof()


async def _ping(socket: WebSocket) -> None:
    """Ping every ``HEARTBEAT_S``; a ping that cannot go out is the pump's silence to notice."""
    with contextlib.suppress(aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError):
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            async with asyncio.timeout(SILENCE_LIMIT_S):
                await socket.ping()
