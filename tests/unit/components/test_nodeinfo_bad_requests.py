"""The node API on loopback under junk: a few short lines, no traceback, no payload, and it
still answers a good request afterwards (raw sockets; TLS for a few, as on the LAN)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from backend.common.tls import server_context
from backend.components.identity.certificate import mint
from backend.components.nodeinfo.payload import NodeInfoSource
from backend.components.nodeinfo.server import NODE_INFO_PATH, NodeApiServer
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.core.bad_requests import PEER_INTERVAL_S
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeOs

MARK = b"JUNK-7f3a"
JUNK = [
    b"\x00\x01\x02" + MARK + b"\xff\xfe\r\n\r\n",
    b"GET /" + MARK + b"A" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G@T /" + MARK + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    bytes(range(256)) + MARK + b"\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nBad\x01Header: " + MARK + b"\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n" + MARK,
    b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + MARK + b"\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\n" + MARK,
]
# A bad request after a good one on the same connection (aiohttp logs it at ERROR).
GOOD = b"GET " + NODE_INFO_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"
LAST = GOOD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
LINE = re.compile(
    r"node API: bad request from 127\.0\.0\.1: \w+ \([A-Za-z ]+\)"
    r"( \(\d+ more bad requests not logged\))?"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def _crash(request: web.Request) -> web.Response:
    raise RuntimeError("a bug in a handler")


def _routes(app: web.Application) -> None:
    app.router.add_post("/echo", _echo)
    app.router.add_get("/crash", _crash)


@contextlib.asynccontextmanager
async def _node_api(context: ssl.SSLContext | None) -> AsyncIterator[int]:
    port = _free_port()
    source = NodeInfoSource(
        node_id=NodeId(str(uuid.uuid4())),
        version="test",
        ports=lambda: Ports(node=port, ollama=1, openai=2, llamacpp=3),
        name=lambda: "desk",
        telemetry=TelemetryView,
        os=NodeOs(system="Linux"),
    )
    server = NodeApiServer(
        port=port, source=source, ssl_context=context, routes=(_routes,), host="127.0.0.1"
    )
    ready = asyncio.Event()
    server.bind_ready(ready.set)
    task = asyncio.get_running_loop().create_task(server.run(), name="test:node-api")
    try:
        async with asyncio.timeout(5):
            await ready.wait()
        yield port
    finally:
        await server.stop()
        await asyncio.wait_for(task, 5)


def _client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _send(port: int, chunks: list[bytes], context: ssl.SSLContext | None = None) -> bytes:
    """Send each chunk in turn (reading the answer to all but the last); the last answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    answer = b""
    try:
        for n, chunk in enumerate(chunks):
            writer.write(chunk)
            await writer.drain()
            if n < len(chunks) - 1:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
        with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
            async with asyncio.timeout(5):
                answer = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return answer


def _junk(n: int) -> list[bytes]:
    kind = n % (len(JUNK) + 1)
    return [GOOD, JUNK[0]] if kind == len(JUNK) else [JUNK[kind]]


def _assert_short(records: list[logging.LogRecord], elapsed: float) -> None:
    assert records, "a bad request leaves one line"
    assert all(record.exc_info is None and record.exc_text is None for record in records)
    assert all(MARK.decode() not in record.getMessage() for record in records)
    assert all(LINE.fullmatch(record.getMessage()) for record in records), records
    # One line a peer per interval: one, plus one for every interval the burst took.
    assert len(records) <= 1 + elapsed // PEER_INTERVAL_S


async def test_600_junk_requests_leave_a_few_short_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with _node_api(None) as port:
        caplog.clear()
        started = time.monotonic()
        answers = [await _send(port, _junk(n)) for n in range(600)]
        elapsed = time.monotonic() - started
        records = list(caplog.records)
        good = await _send(port, [LAST])
    assert all(answer.startswith(b"HTTP/1.") and b" 400 " in answer[:16] for answer in answers)
    _assert_short(records, elapsed)
    assert good.startswith(b"HTTP/1.1 200 OK")
    assert b'"name":"desk"' in good


async def test_junk_over_tls_and_bytes_that_are_not_tls_leave_a_short_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    context = server_context(mint(NodeId(str(uuid.uuid4()))), ())
    async with _node_api(context) as port:
        caplog.clear()
        started = time.monotonic()
        for n in range(2 * len(JUNK) + 2):
            await _send(port, _junk(n), _client_context())
            await _send(port, [JUNK[n % len(JUNK)]])  # not TLS at all: the handshake fails
        elapsed = time.monotonic() - started
        records = list(caplog.records)
        good = await _send(port, [LAST], _client_context())
    _assert_short(records, elapsed)
    assert good.startswith(b"HTTP/1.1 200 OK")


async def test_a_handler_that_crashes_still_logs_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _node_api(None) as port:
        answer = await _send(port, [b"GET /crash HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"])
    assert b" 500 " in answer[:16]
    crashed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in crashed] == ["node API request GET /crash failed"]
    assert crashed[0].exc_info is not None
