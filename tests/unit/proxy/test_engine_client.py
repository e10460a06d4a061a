"""The lean engine client (``engine_client.py``) against real sockets: engines written here
byte by byte, so each answer's framing, timing and breakage is exact."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from yarl import URL

from backend.workers.proxy.upstream.engine_client import (
    EngineClient,
    EngineConnectionError,
    StaleConnection,
)

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
JSON_ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"done":true}'
)


@contextlib.asynccontextmanager
async def serving(serve: Serve) -> AsyncIterator[URL]:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield URL(f"http://127.0.0.1:{port}/api/chat")
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def client(**options: float) -> AsyncIterator[EngineClient]:
    engines = EngineClient(**options)
    try:
        yield engines
    finally:
        await engines.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class KeepAlive:
    """Answers every request on a connection with ``JSON_ANSWER``; counts connections and
    keeps what each request looked like."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                self.requests.append(await read_request(reader))
                writer.write(JSON_ANSWER)
                await writer.drain()
        writer.close()


async def test_a_request_goes_out_as_sent_and_its_connection_is_kept_for_the_next() -> None:
    engine = KeepAlive()
    async with serving(engine.serve) as url, client() as engines:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
        for _ in range(3):
            answer = await engines.request("POST", url.with_query(a="1"), headers, b'{"x":1}')
            assert (answer.status, answer.reason, answer.content_length) == (200, "OK", 13)
            assert answer.headers["content-type"] == "application/json"
            assert await answer.content.read() == b'{"done":true}'
            assert answer.done

        assert engine.connections == 1, "one kept-alive connection for all three"
        assert engines.idle_connections() == 1
    head, body = engine.requests[0]
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /api/chat?a=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{url.port}".encode() in lines
    assert b"Authorization: Bearer k" in lines
    assert b"Content-Length: 7" in lines
    assert body == b'{"x":1}'


async def test_header_text_that_is_not_ascii_passes_both_ways_byte_for_byte() -> None:
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        seen.append(head)
        writer.write(
            "HTTP/1.1 200 Très bien\r\nX-Model: café\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        await reader.read()

    async with serving(serve) as url, client() as engines:
        # As aiohttp's server hands a client's header over: UTF-8, raw bytes escaped.
        sent = b"\xff-raw".decode("utf-8", "surrogateescape")
        answer = await engines.request("POST", url, {"X-Name": "Zoë", "X-Raw": sent}, b"{}")
        assert answer.reason == "Très bien"
        assert answer.headers["X-Model"] == "café"
    assert "X-Name: Zoë".encode() in seen[0]
    assert b"X-Raw: \xff-raw" in seen[0]


async def test_a_stream_is_read_chunk_by_chunk_as_the_engine_writes_it() -> None:
    step = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b'{"done":false}\n')
        )
        await writer.drain()
        await step.wait()  # the second record only once the first was read
        writer.write(chunk(b'{"done":true}\n') + b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        assert answer.content_length is None
        assert await answer.content.readany() == b'{"done":false}\n'
        step.set()
        assert await answer.content.readany() == b'{"done":true}\n'
        assert await answer.content.readany() == b""
        assert engines.idle_connections() == 1, "a whole chunked answer frees its connection"


async def test_a_pooled_connection_the_engine_closed_is_stale_and_a_fresh_one_is_not() -> None:
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(JSON_ANSWER)
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")  # a second request: closed unanswered
        writer.close()

    async with serving(serve) as url, client() as engines:
        first = await engines.request("POST", url, {}, b"{}")
        assert await first.content.read() == b'{"done":true}'
        with pytest.raises(StaleConnection):
            await engines.request("POST", url, {}, b"{}")
        again = await engines.request("POST", url, {}, b"{}", fresh=True)
        assert await again.content.read() == b'{"done":true}'
    assert connections == 2


async def test_a_new_connection_that_breaks_before_the_answer_is_an_error_not_stale() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.close()

    async with serving(serve) as url, client() as engines:
        with pytest.raises(EngineConnectionError):
            await engines.request("POST", url, {}, b"{}")


async def test_a_body_cut_off_mid_way_fails_with_a_payload_error() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(b'{"done":false}\n')
        )
        await writer.drain()
        writer.close()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        assert await answer.content.readany() == b'{"done":false}\n'
        with pytest.raises(aiohttp.ClientPayloadError):
            await answer.content.readany()
        assert engines.idle_connections() == 0


async def test_a_body_delimited_by_the_close_ends_there_whole() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        assert await answer.content.read() == b"all of it"


async def test_an_answer_that_is_not_http_is_an_error() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with serving(serve) as url, client() as engines:
        with pytest.raises(EngineConnectionError, match="not valid HTTP"):
            await engines.request("POST", url, {}, b"{}")
        assert engines.idle_connections() == 0


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    engine = KeepAlive()
    async with serving(engine.serve) as url, client() as engines:
        with pytest.raises(ValueError, match="line break"):
            await engines.request("POST", url, {"X-Evil": "a\r\nHost: elsewhere"}, b"{}")
        await asyncio.sleep(0.05)
    assert engine.connections == 0


async def test_an_engine_that_talks_out_of_turn_loses_its_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(JSON_ANSWER + JSON_ANSWER)  # a second answer nobody asked for
        await writer.drain()
        await reader.read()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        assert await answer.content.read() == b'{"done":true}'
        await asyncio.sleep(0.05)
        assert engines.idle_connections() == 0


async def test_a_body_nobody_reads_holds_the_engine_back_and_arrives_whole() -> None:
    piece = b"x" * 65536
    pieces = 64  # 4 MiB, far past the client's unread limit
    written = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(piece) * pieces))
        for _ in range(pieces):
            writer.write(piece)
            await writer.drain()
            written += 1
        await reader.read()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        await asyncio.sleep(0.3)
        assert written < pieces, "the engine was not held back"
        body = await answer.content.read()
        assert len(body) == len(piece) * pieces
        assert engines.idle_connections() == 1, "read again once the body was taken"


async def test_sent_is_told_only_once_the_engine_has_taken_the_whole_request() -> None:
    body = b"y" * (16 * 1024 * 1024)  # more than the kernel's buffers hold
    reading = asyncio.Event()
    told: list[bool] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reading.wait()
        await read_request(reader)
        writer.write(JSON_ANSWER)
        await writer.drain()
        await reader.read()

    async with serving(serve) as url, client() as engines:
        asking = asyncio.ensure_future(
            engines.request("POST", url, {}, body, sent=lambda: told.append(reading.is_set()))
        )
        await asyncio.sleep(0.3)
        assert told == [], "sent before the engine read the request"
        reading.set()
        answer = await asking
        assert told == [True]
        assert await answer.content.read() == b'{"done":true}'


async def test_dropping_an_answer_mid_body_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(b"a"))
        await writer.drain()
        if await reader.read() == b"":
            closed.set()

    async with serving(serve) as url, client() as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        assert await answer.content.readany() == b"a"
        answer.close()
        await asyncio.wait_for(closed.wait(), 5)
        assert engines.idle_connections() == 0


async def test_idle_connections_are_closed_after_the_keepalive() -> None:
    engine = KeepAlive()
    async with serving(engine.serve) as url, client(keepalive_s=0.1) as engines:
        answer = await engines.request("POST", url, {}, b"{}")
        await answer.content.read()
        assert engines.idle_connections() == 1
        await asyncio.sleep(0.35)
        assert engines.idle_connections() == 0


async def test_no_engine_listening_is_an_os_error() -> None:
    async with serving(KeepAlive().serve) as url:
        pass  # closed: nothing listens on its port now
    async with client() as engines:
        with pytest.raises(ConnectionRefusedError):
            await engines.request("POST", url, {}, b"{}")


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not a dependency on Windows")
def test_the_same_on_uvloop_the_workers_loop() -> None:
    import uvloop

    async def scenario() -> None:
        await test_a_request_goes_out_as_sent_and_its_connection_is_kept_for_the_next()
        await test_a_stream_is_read_chunk_by_chunk_as_the_engine_writes_it()
        await test_a_body_nobody_reads_holds_the_engine_back_and_arrives_whole()
        await test_sent_is_told_only_once_the_engine_has_taken_the_whole_request()

    uvloop.run(scenario())
