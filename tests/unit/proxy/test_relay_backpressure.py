"""A client slower than its engine gets the whole stream, in order, and the proxy does not
buffer what the client has not taken: it stops reading the engine instead.

The relay writes each chunk of the lean client's answer from the engine connection's callback;
when the client's connection has too much unsent it stops reading the engine until that is
written (``stream._Relay._pump``). A lost or repeated chunk there would corrupt the stream.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from aiohttp import web

from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.upstream import stream
from backend.workers.proxy.upstream.engine_client import EngineResponse
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import scripted_door

RECORDS = 1500
PAD = 8192  # some 12 MB in all: far more than the kernel holds between proxy and client
# What the proxy may hold unsent for its client: the relay's bound, plus what one read of the
# engine's connection brings (asyncio and uvloop read at most 256 KiB at a time).
HELD_AT_MOST = 1024 * 1024


class _Numbered(ScriptedEngine):
    """Streams ``RECORDS`` numbered records as fast as its connection takes them, then the
    final one."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for n in range(RECORDS):
            record = {"model": "m", "n": n, "pad": "x" * PAD, "done": False}
            await response.write(json.dumps(record).encode() + b"\n")
        await response.write(b'{"model": "m", "done": true}\n')
        await response.write_eof()
        return response


async def _slow_read(port: int) -> bytes:
    """The raw answer, read with a pause first and short ones after."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**20)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    writer.write(
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    parts = [await reader.read(4096)]
    await asyncio.sleep(0.5)
    while part := await reader.read(65536):
        parts.append(part)
        await asyncio.sleep(0.002)
    writer.close()
    return b"".join(parts)


def _dechunk(raw: bytes) -> bytes:
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(body)
        body += rest[:size]
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]


async def test_a_slow_client_gets_every_record_in_order_and_the_engine_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held: list[int] = []  # unsent for the client after each chunk the relay wrote
    pauses: list[bool] = []
    send_now, pause = stream._Relayed.send_now, EngineResponse.pause

    def spy_send_now(
        self: stream._Relayed, transport: asyncio.Transport, chunked: bool, data: bytes
    ) -> None:
        send_now(self, transport, chunked, data)
        held.append(transport.get_write_buffer_size())

    def spy_pause(self: EngineResponse) -> None:
        pauses.append(True)
        pause(self)

    monkeypatch.setattr(stream._Relayed, "send_now", spy_send_now)
    monkeypatch.setattr(EngineResponse, "pause", spy_pause)
    engine = _Numbered("e")
    events: list[Any] = []
    async with scripted_door(engine, JobLog(events.extend), slots=1) as door:
        port = door.server.port
        assert port is not None
        raw = await _slow_read(port)

    lines = _dechunk(raw).splitlines()
    numbers = [json.loads(line)["n"] for line in lines[:-1]]
    assert numbers == list(range(RECORDS)), "a record lost, repeated or out of order"
    assert json.loads(lines[-1])["done"] is True
    assert held and max(held) <= HELD_AT_MOST, f"{max(held)} bytes held for a slow client"
    assert pauses, "the relay never had to wait for its client"
    assert [e.kind for e in events if e.kind in ("completed", "errored")] == ["completed"]
