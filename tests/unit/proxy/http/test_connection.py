"""PAIR's HTTP/1.1 connections (``backend/workers/proxy/http/``) serving a small aiohttp
application on a real loopback socket, spoken to in raw bytes: keep-alive and pipelining,
bodies (chunked, gzip, undecodable, unread, paused), a client that hangs up, a handler that
crashes, junk, idle connections, Expect, HEAD, streams, and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from backend.core.bad_requests import describe
from backend.workers.proxy.http.server import Http1Runner


@dataclass
class Served:
    port: int
    runner: Http1Runner
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    bad: list[tuple[str | None, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


def _app(served: Served) -> web.Application:
    async def echo(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except RequestPayloadError:
            return web.Response(status=400, text="undecodable")
        served.bodies.append(body)
        return web.Response(body=request.path.encode() + b":" + body)

    async def ignore(request: web.Request) -> web.StreamResponse:
        return web.Response(text="not read")

    async def hold(request: web.Request) -> web.StreamResponse:
        served.started.set()
        try:
            await served.release.wait()
        except asyncio.CancelledError:
            served.cancelled.set()
            raise
        return web.Response(text="released")

    async def crash(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("the handler broke")

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for n in range(3):
            await response.write(b"part%d\n" % n)
        await response.write_eof()
        return response

    async def slow_reader(request: web.Request) -> web.StreamResponse:
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            await asyncio.sleep(0.001)
        return web.Response(text=str(size))

    async def missing(request: web.Request) -> web.StreamResponse:
        raise web.HTTPNotFound(text="nothing here")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_post("/ignore", ignore)
    app.router.add_get("/hold", hold)
    app.router.add_get("/crash", crash)
    app.router.add_get("/stream", stream)
    app.router.add_post("/slow", slow_reader)
    app.router.add_get("/missing", missing)
    return app


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    holder = Served(port=0, runner=None)  # type: ignore[arg-type]

    def note(peer: str | None, exc: BaseException) -> None:
        holder.bad.append((peer, describe(exc)))

    runner = Http1Runner(
        _app(holder), keepalive_timeout=0.5, on_bad_request=note, shutdown_timeout=0.5
    )
    await runner.setup()
    server = await asyncio.get_running_loop().create_server(
        runner.protocol, "127.0.0.1", 0, family=socket.AF_INET
    )
    holder.port = server.sockets[0].getsockname()[1]
    holder.runner = runner
    try:
        yield holder
    finally:
        holder.release.set()
        server.close()
        await runner.cleanup()
        await server.wait_closed()


async def _connect(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", served.port)


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One answer with a length or chunks: its status line, headers and body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status, *lines = head[:-4].split(b"\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(b":", 1) for line in lines)}
    if headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return status, headers, body
            body += chunk[:-2]
    length = int(headers.get(b"content-length", b"0"))
    return status, headers, await asyncio.wait_for(reader.readexactly(length), 5)


def _post(path: str, body: bytes, *extra: bytes) -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: x", b"Content-Length: %d" % len(body)]
    return b"\r\n".join([*lines, *extra]) + b"\r\n\r\n" + body


async def _closed(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(reader.read(), 5) == b""
    return True


async def test_requests_on_one_kept_connection_and_pipelined(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(_post("/echo", b"one"))
    status, _, body = await _answer(reader)
    assert (status, body) == (b"HTTP/1.1 200 OK", b"/echo:one")
    writer.write(_post("/echo", b"two") + _post("/echo?x=1", b"three") + _post("/echo", b""))
    answers = [await _answer(reader) for _ in range(3)]
    assert [a[2] for a in answers] == [b"/echo:two", b"/echo:three", b"/echo:"]
    writer.close()


async def test_chunked_and_gzip_bodies_are_decoded(served: Served) -> None:
    reader, writer = await _connect(served)
    chunked = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    )
    writer.write(chunked)
    assert (await _answer(reader))[2] == b"/echo:abcdefg"
    packed = gzip.compress(b"compressed body")
    writer.write(_post("/echo", packed, b"Content-Encoding: gzip"))
    assert (await _answer(reader))[2] == b"/echo:compressed body"
    writer.write(_post("/echo", b"not gzip at all", b"Content-Encoding: gzip"))
    status, _, body = await _answer(reader)
    assert (status, body) == (b"HTTP/1.1 400 Bad Request", b"undecodable")
    writer.close()


async def test_a_body_left_unread_does_not_spoil_the_connection(served: Served) -> None:
    reader, writer = await _connect(served)
    big = b"x" * 300_000  # past the payload's buffer: reading would pause for good
    writer.write(_post("/ignore", big))
    assert (await _answer(reader))[2] == b"not read"
    writer.write(_post("/echo", b"next"))
    assert (await _answer(reader))[2] == b"/echo:next"
    writer.close()


async def test_a_large_body_read_slowly_arrives_whole(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(_post("/slow", b"y" * 1_000_000))
    status, _, body = await _answer(reader)
    assert (status, body) == (b"HTTP/1.1 200 OK", b"1000000")
    writer.close()


async def test_a_client_that_hangs_up_cancels_its_handler(served: Served) -> None:
    _, writer = await _connect(served)
    writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(served.started.wait(), 5)
    writer.close()
    await asyncio.wait_for(served.cancelled.wait(), 5)


async def test_a_crashing_handler_is_a_500_logged_with_its_traceback(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    reader, writer = await _connect(served)
    writer.write(b"GET /crash HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, _ = await _answer(reader)
    assert status == b"HTTP/1.1 500 Internal Server Error"
    assert headers[b"connection"] == b"close"
    assert await _closed(reader)
    causes = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert "the handler broke" in causes


async def test_an_http_exception_is_the_answer(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = await _answer(reader)
    assert (status, body) == (b"HTTP/1.1 404 Not Found", b"nothing here")
    writer.write(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await _answer(reader))[0] == b"HTTP/1.1 404 Not Found"
    writer.close()


@pytest.mark.parametrize(
    ("junk", "kind"),
    [
        (b"\x00\x01junk\xff\r\n\r\n", "BadHttpMethod (invalid HTTP method)"),
        (b"GET /" + b"A" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "line too long"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nBad\x01Header: y\r\n\r\n", "malformed request"),
        (b"GET / HTTP/1.1\r\nX: " + b"v" * 9000 + b"\r\n\r\n", "line too long"),
    ],
)
async def test_junk_is_a_bare_400_and_one_note(served: Served, junk: bytes, kind: str) -> None:
    reader, writer = await _connect(served)
    writer.write(junk)
    status, _, body = await _answer(reader)
    assert (status, body) == (b"HTTP/1.1 400 Bad Request", b"Bad Request")
    assert await _closed(reader)
    assert len(served.bad) == 1
    peer, said = served.bad[0]
    assert peer == "127.0.0.1" and kind in said


async def test_junk_after_a_good_request_is_answered_in_turn(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(served.started.wait(), 5)
    writer.write(b"\x00junk\r\n\r\n")
    await asyncio.sleep(0.05)
    served.release.set()
    assert (await _answer(reader))[2] == b"released"
    assert (await _answer(reader))[0] == b"HTTP/1.1 400 Bad Request"
    assert await _closed(reader)


async def test_an_idle_connection_closes_after_the_keepalive_timeout(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(_post("/echo", b"once"))
    await _answer(reader)
    assert await _closed(reader)  # 0.5 s in this fixture
    half, _ = await _connect(served)  # a head that never ends is closed the same way
    assert await _closed(half)


async def test_a_connection_in_use_outlives_the_keepalive_timeout(served: Served) -> None:
    reader, writer = await _connect(served)
    for n in range(6):  # 1.2 s of requests 0.2 s apart, against a 0.5 s idle timeout
        writer.write(_post("/echo", b"%d" % n))
        assert (await _answer(reader))[2] == b"/echo:%d" % n
        await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    idle_from = loop.time()
    assert await _closed(reader)
    assert loop.time() - idle_from >= 0.25  # the last 0.2 s counted, then the rest of 0.5 s


async def test_expect_continue_head_and_streams(served: Served) -> None:
    reader, writer = await _connect(served)
    writer.write(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
    )
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == (
        b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    writer.write(b"body")
    assert (await _answer(reader))[2] == b"/echo:body"
    writer.write(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 OK")
    writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")  # nothing of HEAD's body came
    _, headers, body = await _answer(reader)
    assert headers[b"transfer-encoding"] == b"chunked"
    assert body == b"part0\npart1\npart2\n"
    writer.close()


async def test_http_10_and_connection_close_end_the_connection(served: Served) -> None:
    for request in (
        b"GET /stream HTTP/1.0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nz",
    ):
        reader, writer = await _connect(served)
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.split(b"\r\n")[0].endswith(b"200 OK")
        rest = await asyncio.wait_for(reader.read(), 5)  # returns only once it is closed
        assert rest in (b"part0\npart1\npart2\n", b"/echo:z")
        writer.close()


async def test_shutdown_closes_idle_connections_and_waits_for_a_request(
    served: Served,
) -> None:
    idle_reader, idle_writer = await _connect(served)
    idle_writer.write(_post("/echo", b"x"))
    await _answer(idle_reader)
    busy_reader, busy_writer = await _connect(served)
    busy_writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(served.started.wait(), 5)
    stopping = asyncio.create_task(served.runner.cleanup())
    assert await _closed(idle_reader)
    await asyncio.wait_for(stopping, 5)  # the held request had its 0.5 s, then was cancelled
    assert served.cancelled.is_set()
    assert await _closed(busy_reader)
