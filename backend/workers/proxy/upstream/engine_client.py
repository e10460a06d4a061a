"""A lean HTTP/1.1 client for engines reached in plain HTTP: the relay's hot path.

Every inference request to this computer's engine (and to one added by an ``http://`` address)
goes through here; peers, over mutual TLS, and everything off the hot path (model lists, slot
polls, loads) keep aiohttp's client. aiohttp's client does much that a relay never needs per
request (cookies, redirects, auth, proxies, traces, timers, a task to write the body) and hands
each body chunk over through a reader that wakes the reading task and resumes the transport
once per read; measured against a byte-for-byte relay, that machinery was most of what a bare
aiohttp pass-through cost per stream (bench/README.md, "2026-12-03, after: a lean engine
client").

Here a request is one write of its head and body; the answer is parsed by llhttp (``httptools``)
straight from the connection's ``data_received``. Its body goes to a sink (the relay, which
writes it on to the client in the same callback: what one read brought, in one call) or, until
one is set, is kept for ``readany``. Connections are kept alive and pooled per origin, newest
first; one the engine has closed leaves the pool by itself, and one left idle for
``KEEPALIVE_S`` is closed.

A request whose pooled connection turns out to be closed before any byte of the answer raises
``StaleConnection`` (the caller tries once more on a new connection, ``fresh=True``). A
connection that breaks in the middle of an answer fails the body with
``aiohttp.ClientPayloadError``, as aiohttp's client does, so the relay needs one except clause
for both clients.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from collections.abc import Callable, Mapping
from typing import cast

import aiohttp
import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

KEEPALIVE_S = 30.0
CONNECT_TIMEOUT_S = 10.0
# Body bytes kept unread before the engine's connection stops being read (and resumed below
# ``_LOW``): an engine answering faster than its client reads is held back, not buffered.
_HIGH = 256 * 1024
_LOW = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})

Sink = Callable[[bytes], None]
_SET_HERE = frozenset({"host", "content-length", "transfer-encoding"})
_SET_HERE_WITH_KEY = _SET_HERE | {"authorization"}


class StaleConnection(ConnectionError):
    """A pooled connection was closed by the engine before it answered: safe to send again."""


class EngineConnectionError(ConnectionError):
    """The engine's connection broke before its answer's head (on a new connection, or after
    some bytes of the head): the engine may have the request, so it is not sent again."""


class EngineResponse:
    """One answer: its status line and headers, then its body by ``readany``/``read`` or by
    a sink (``relay``). The same surface as the part of aiohttp's response the relay uses."""

    __slots__ = (
        "_batch",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_paused",
        "_sink",
        "_size",
        "_waiter",
        "content_length",
        "headers",
        "reason",
        "status",
    )

    def __init__(
        self,
        conn: _Connection,
        status: int,
        reason: str,
        headers: CIMultiDictProxy[str],
        content_length: int | None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content_length = content_length
        self._conn: _Connection | None = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: BaseException | None = None
        self._sink: Sink | None = None
        self._batch: list[bytes] = []  # for the sink: what one read of the connection brought

    @property
    def content(self) -> EngineResponse:
        """The body reader (this object), as ``aiohttp.ClientResponse.content``."""
        return self

    @property
    def done(self) -> bool:
        """Whether the whole body has come (it may still be unread)."""
        return self._done

    async def readany(self) -> bytes:
        """What has come of the body and is unread (waiting for some); ``b""`` at its end."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            await self._woken()
        data = self.take_buffered()
        self.resume()  # if a backlog had stopped the reading
        return data

    async def read(self, n: int = -1) -> bytes:
        """The rest of the body (``n`` < 0), or at most ``n`` bytes of it once some came."""
        if n >= 0:
            data = await self.readany()
            if len(data) > n:
                self._chunks.appendleft(data[n:])
                self._size += len(data) - n
                data = data[:n]
            return data
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    def take_buffered(self) -> bytes:
        """What has come and is unread, without waiting (``b""``: nothing)."""
        chunks = self._chunks
        if not chunks:
            return b""
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        return data

    def relay(self, sink: Sink | None) -> None:
        """From now on the body goes to ``sink`` as it comes, inside the connection's callback:
        what one read of the connection brought, in one call (the engine's chunks that arrived
        together leave together), and nothing is kept for ``readany`` (take what is buffered
        first). A sink that raises ends the body with its error. ``wait`` tells the relay of
        the body's end, its break, or a ``pause``."""
        self._sink = sink

    @property
    def paused(self) -> bool:
        """Whether the engine's connection is not being read (``pause``)."""
        return self._paused

    async def wait(self) -> None:
        """Until the body ends (``done``), breaks (raised), or is paused."""
        if self._error is not None:
            raise self._error
        if self._done or self._paused:
            return
        await self._woken()
        if self._error is not None:
            raise self._error

    async def _woken(self) -> None:
        """Until the connection has news (``_wake``)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def pause(self) -> None:
        """Stop reading the engine's connection (its client is slow to take the body)."""
        if not self._paused:
            self._paused = True
            conn = self._conn
            if conn is not None:
                conn.pause_reading()
            self._wake()

    def resume(self) -> None:
        """Read the engine's connection again."""
        if self._paused:
            self._paused = False
            conn = self._conn
            if conn is not None:
                conn.resume_reading()

    def close(self) -> None:
        """Drop the answer; a connection with its body still coming is closed (so the engine
        stops the work and frees its slot), a finished one is already back in its pool."""
        self._sink = None
        conn = self._conn
        self._conn = None
        if conn is not None and not self._done:
            conn.close()

    # From the connection.

    def _feed(self, data: bytes) -> None:
        if self._sink is not None:
            self._batch.append(data)  # handed over by ``_flush`` once the read is parsed
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size > _HIGH:
            self.pause()  # until ``readany`` takes the backlog
        self._wake()

    def _flush(self) -> None:
        batch = self._batch
        sink = self._sink
        if not batch or sink is None:
            return
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        batch.clear()
        try:
            sink(data)
        except Exception as exc:  # the relay's own failure: the body ends with it
            self._sink = None
            conn = self._conn
            self._fail(exc)
            if conn is not None:
                conn.close()

    def _finish(self) -> None:
        self._flush()
        self._done = True
        self._conn = None
        self._wake()

    def _fail(self, error: BaseException) -> None:
        self._flush()
        if not self._done and self._error is None:
            self._error = error
            self._conn = None
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One kept-alive connection to an engine: one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[EngineResponse] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._reading_paused = False
        self._response: EngineResponse | None = None
        self._reason = ""
        self._headers: list[tuple[str, str]] = []
        self._received = False  # a byte of the current answer came
        self.closed = False
        self.reused = False
        self.idle_since = 0.0

    # asyncio.Protocol.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Told as soon as anything is left unsent (and when it is all sent): ``sent`` is
        # reported only once the whole request is with the kernel.
        transport.set_write_buffer_limits(high=0)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            return
        if self._head is None and self._response is None:
            self.close()  # nothing was asked: an engine that talks out of turn is not trusted
            return
        self._received = True
        try:
            parser.feed_data(data)
            response = self._response
            if response is not None:
                response._flush()
        except httptools.HttpParserError as exc:
            self._broken(EngineConnectionError(f"the engine's answer is not valid HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._transport = None
        self._parser = None  # it refers to this protocol: no cycle left for the collector
        self._pool.forget(self)
        response = self._response
        if response is not None and _ends_at_close(response):
            self._response = None
            response._finish()
        reason = f": {exc}" if exc is not None else ""
        if self._received or not self.reused:
            error: Exception = EngineConnectionError(
                f"the engine closed the connection before the end of its answer{reason}"
            )
        else:
            error = StaleConnection(f"the engine had closed the kept-alive connection{reason}")
        self._broken(error)
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_exception(error)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    # httptools' callbacks.

    # Header text is read and written as aiohttp does: UTF-8, bytes that are not kept as they
    # came (surrogate escapes), so a header relayed either way is the same bytes.

    def on_status(self, status: bytes) -> None:
        self._reason = status.decode("utf-8", "surrogateescape")

    def on_header(self, name: bytes, value: bytes) -> None:
        text = (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        self._headers.append(text)

    def on_headers_complete(self) -> None:
        parser = self._parser
        head = self._head
        assert parser is not None
        if head is None or head.done():
            raise RuntimeError("an answer that was not asked for")
        headers = CIMultiDictProxy(CIMultiDict(self._headers))
        self._headers = []
        status = parser.get_status_code()
        length_text = headers.get("Content-Length")
        length = int(length_text) if length_text is not None and length_text.isdigit() else None
        if status in _NO_BODY_STATUS:
            length = None
        response = EngineResponse(self, status, self._reason, headers, length)
        self._response = response
        self._head = None
        head.set_result(response)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            response._feed(body)

    def on_message_complete(self) -> None:
        response = self._response
        self._response = None
        parser = self._parser
        keep = parser is not None and parser.should_keep_alive()
        if response is not None:
            response._finish()
        if keep and not self.closed:
            if self._reading_paused:
                self.resume_reading()
            self._received = False
            self.reused = True
            self._pool.put(self)
        else:
            self.close()

    # The client's side.

    async def exchange(
        self, head: bytes, body: bytes, sent: Callable[[], None] | None
    ) -> EngineResponse:
        """Send one request; its answer once its head is in."""
        transport = self._transport
        if transport is None or self.closed:
            if self.reused:
                raise StaleConnection("the engine had closed the kept-alive connection")
            raise EngineConnectionError("the engine closed the connection at once")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[EngineResponse] = loop.create_future()
        self._head = answer
        self._received = False
        try:
            if body:
                transport.writelines((head, body))
            else:
                transport.write(head)
            if self._writing_paused:
                self._drained = loop.create_future()
                await self._drained
                self._drained = None
            if sent is not None:
                sent()
            return await answer
        except BaseException:
            self._head = None
            self.close()  # half a request on it, or an answer that will not be read
            raise

    def pause_reading(self) -> None:
        if self._transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._pool.forget(self)
            if self._transport is not None:
                self._transport.close()

    def _broken(self, error: Exception) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        response, self._response = self._response, None
        if response is not None:
            response._fail(aiohttp.ClientPayloadError(str(error)))


def _ends_at_close(response: EngineResponse) -> bool:
    """Whether ``response``'s body is delimited by the connection's close (no length, not
    chunked): its end is then that close, not a break."""
    if response.content_length is not None or response.status in _NO_BODY_STATUS:
        return False
    return "chunked" not in response.headers.get("Transfer-Encoding", "").lower()


class _Pool:
    """The idle connections to one origin, newest last."""

    def __init__(self, owner: EngineClient, authorization: str | None = None) -> None:
        self._owner = owner
        self.idle: list[_Connection] = []
        # The origin's key (an engine PAIR launched with one), in every request's head.
        self.authorization = authorization

    def take(self) -> _Connection | None:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def put(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self.idle.append(conn)
        self._owner._idle_added()

    def forget(self, conn: _Connection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)


class EngineClient:
    """Plain-HTTP requests to engines over pooled, kept-alive connections."""

    def __init__(self, *, keepalive_s: float = KEEPALIVE_S) -> None:
        self._keepalive_s = keepalive_s
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._keys: Mapping[tuple[str, int], str] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    def use_keys(self, keys: Mapping[tuple[str, int], str]) -> None:
        """The ``Authorization`` value of each origin that needs one (``EngineKeys``)."""
        self._keys = keys
        for origin, pool in self._pools.items():
            pool.authorization = keys.get(origin)

    async def request(
        self,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        fresh: bool = False,
        sent: Callable[[], None] | None = None,
    ) -> EngineResponse:
        """Send ``method url`` with ``headers`` and ``body``; the answer once its head is in.

        ``fresh``: on a new connection, not a pooled one. ``sent`` is called once the whole
        request is with the kernel. Raises ``StaleConnection`` (a pooled connection the engine
        had closed), ``EngineConnectionError`` (it broke before the answer), ``OSError`` or
        ``TimeoutError`` (no connection) and ``ValueError`` (a header that cannot be sent)."""
        if self._closed:
            raise RuntimeError("the engine client is closed")
        host = url.raw_host or ""
        port = url.port or 80
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[(host, port)] = _Pool(self, self._keys.get((host, port)))
        head = _head(method, url, host, port, headers, body, pool.authorization)
        conn = None if fresh else pool.take()
        if conn is None:
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, conn = await loop.create_connection(lambda: _Connection(pool), host, port)
        return await conn.exchange(head, body or b"", sent)

    def idle_connections(self) -> int:
        """How many kept-alive connections wait in the pools."""
        return sum(len(pool.idle) for pool in self._pools.values())

    async def close(self) -> None:
        """Close every idle connection; no request may be made after."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for pool in self._pools.values():
            for conn in list(pool.idle):
                conn.close()
        self._pools.clear()

    def _idle_added(self) -> None:
        if self._sweep is None and not self._closed:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(self._keepalive_s, self._expire)

    def _expire(self) -> None:
        self._sweep = None
        oldest = time.monotonic() - self._keepalive_s
        left = False
        for pool in self._pools.values():
            for conn in [conn for conn in pool.idle if conn.idle_since <= oldest]:
                conn.close()
            left = left or bool(pool.idle)
        if left:
            self._idle_added()


def _head(
    method: str,
    url: URL,
    host: str,
    port: int,
    headers: Mapping[str, str],
    body: bytes | None,
    authorization: str | None = None,
) -> bytes:
    """The request line and headers, ``Host`` and ``Content-Length`` set here, and
    ``authorization`` in place of the client's own when the engine needs PAIR's key."""
    authority = f"[{host}]" if ":" in host else host
    lines = [f"{method} {url.raw_path_qs} HTTP/1.1\r\nHost: {authority}:{port}\r\n"]
    skipped = _SET_HERE if authorization is None else _SET_HERE_WITH_KEY
    for name, value in headers.items():
        if name.lower() in skipped:
            continue
        lines.append(f"{name}: {value}\r\n")
    if authorization is not None:
        lines.append(f"Authorization: {authorization}\r\n")
    if body is not None or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body or b'')}\r\n")
    lines.append("\r\n")
    text = "".join(lines)
    # Each piece ends in the one line break it may hold (the first holds two: the request
    # line's and Host's); any other is in a name or value, and would smuggle a header in.
    breaks = len(lines) + 1
    if text.count("\n") != breaks or text.count("\r") != breaks:
        raise ValueError("a header holds a line break")
    return text.encode("utf-8", "surrogateescape")
