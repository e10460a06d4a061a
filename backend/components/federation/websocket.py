"""JSON-RPC over a WebSocket: the member link's transport.

The link runs on the node API's one TLS port (mutual TLS, pinned), so it needs no port of its
own; a WebSocket is the byte pipe, and the usual ``RpcPeer`` speaks newline-framed JSON-RPC
over it. The WebSocket's own pings (every ``HEARTBEAT_S``) notice a member that vanished
without closing its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import aiohttp

from backend.protocol.peer import NotificationHandler, RequestHandler, RpcPeer

HEARTBEAT_S = 10.0
# A member's answers and pushes are small (a job list of 1000 entries is ~0.5 MiB).
MAX_FRAME_BYTES = 4 * 1024 * 1024


class WebSocket(Protocol):
    """What both aiohttp WebSocket classes (server and client side) offer."""

    async def send_bytes(self, data: bytes) -> None:
        """Send one binary message."""

    async def receive(self) -> aiohttp.WSMessage:
        """The next message (close and error messages included)."""

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


async def serve(socket: WebSocket, peer: RpcPeer, reader: asyncio.StreamReader) -> None:
    """Run ``peer`` until the WebSocket or the peer ends, then close the WebSocket."""
    pump = asyncio.create_task(_pump(socket, reader), name=f"{peer.name}:pump")
    try:
        await peer.run()
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        with contextlib.suppress(Exception):
            await socket.close()


async def _pump(socket: WebSocket, reader: asyncio.StreamReader) -> None:
    try:
        while True:
            message = await socket.receive()
            if message.type == aiohttp.WSMsgType.BINARY:
                reader.feed_data(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                reader.feed_data(message.data.encode())
            else:  # close, closing, closed or error: the link is over
                return
    finally:
        reader.feed_eof()
