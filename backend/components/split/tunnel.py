"""The RPC tunnel's wire: llama.cpp's RPC byte stream carried as WebSocket binary frames over
the node API's pinned mutual TLS, so ``rpc-server`` (insecure, never to face the network) is
reached only through a member's certificate.

Why a WebSocket and not a bare upgraded stream: it rides the node API's one port and aiohttp's
server as it is (no transport hijacking), the members-only gate applies to it like to every
``/v1/cluster/*`` route, and a frame costs 2 to 14 header bytes plus a 4-byte mask that aiohttp
applies in C. aiohttp's writer awaits a drain only when more than its limit is queued, so a
small message costs no extra await; a slow side pauses the other (backpressure both ways).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import aiohttp

from backend.common.tasks import wait_first
from backend.components.federation.websocket import WebSocket

log = logging.getLogger(__name__)

TUNNEL_PATH = "/v1/cluster/rpc-tunnel"
# Weights go to rpc-server in large ``set_tensor`` messages at load; commands are a few bytes.
# One frame holds at most this much, so a large message streams instead of being buffered whole.
CHUNK_BYTES = 256 * 1024
MAX_FRAME_BYTES = 2 * CHUNK_BYTES
# A polite close waits for the other side's close frame; a cut tunnel never sends one.
CLOSE_LIMIT_S = 1.0


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Send each small RPC message at once: the protocol waits for every answer (latency-bound),
    so Nagle's algorithm would hold a request back for the previous one's ACK."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: WebSocket, *, name: str
) -> None:
    """Carry bytes both ways between a local TCP stream and ``frames`` until either side ends;
    the other side is then closed too (the RPC protocol has no half-closed use)."""
    try:
        await wait_first(_to_frames(reader, frames), _to_stream(frames, writer), name=name)
    except (ConnectionError, aiohttp.ClientError, OSError) as exc:
        log.debug("%s ended: %s", name, exc)
    finally:
        await asyncio.shield(_close(writer, frames))


async def _to_frames(reader: asyncio.StreamReader, frames: WebSocket) -> None:
    while data := await reader.read(CHUNK_BYTES):
        await frames.send_bytes(data)


async def _to_stream(frames: WebSocket, writer: asyncio.StreamWriter) -> None:
    while True:
        message = await frames.receive()
        if message.type is not aiohttp.WSMsgType.BINARY:
            return  # closed, failed, or text: not this protocol
        writer.write(message.data)
        await writer.drain()


async def _close(writer: asyncio.StreamWriter, frames: WebSocket) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_LIMIT_S):
            await frames.close()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_LIMIT_S):
            await writer.wait_closed()
