"""One client connection to a listener of the proxy worker, served by its aiohttp application.

httptools (llhttp, C) parses the requests; each head becomes aiohttp's message and request, and
the application's handler answers it with aiohttp's responses, as aiohttp's own protocol would
do, without its per-request machinery. Requests are served one at a time in order (pipelined
ones wait their turn, and reading pauses past ``MAX_QUEUED``); a body streams into the
request's payload as it arrives, decoded as its ``Content-Encoding`` says, and reading pauses
while the handler has not read what came. A body the handler left unread is skipped, so the
connection can serve the next request.

A connection that closes cancels the request being served (the handler sees
``CancelledError``: an engine's request ends, and its slot is freed). A handler's exception is
a 500 (logged with its traceback); a request that is not HTTP is a 400 with no detail, and the
connection closes (one short log line, through ``on_bad_request``). An idle kept-alive
connection closes after ``keepalive_timeout`` s, a half-sent head included.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.helpers import set_exception
from aiohttp.http import RawRequestMessage, StreamWriter
from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, InvalidURLError
from aiohttp.http_parser import DeflateBuffer
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestPayloadError

from backend.workers.proxy.http.head import MAX_FIELD, MAX_HEADERS, MAX_LINE, Head, has_body

log = logging.getLogger(__name__)

# Requests parsed ahead of the one being served, past which reading pauses.
MAX_QUEUED = 8
PAYLOAD_LIMIT = 2**16  # aiohttp's: a body's buffer pauses reading at twice this
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 11\r\nConnection: close\r\n\r\nBad Request"
)
_INTERNAL_ERROR = "500 Internal Server Error\n\nServer got itself in trouble"


class Serving(Protocol):
    """What a connection needs of its server (``server.Http1Server``)."""

    loop: asyncio.AbstractEventLoop
    keepalive_timeout: float
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    on_bad_request: Callable[[str | None, BaseException], None]
    handle: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

    def make_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: Http1Connection,
        writer: StreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest: ...

    def connection_made(self, connection: Http1Connection) -> None: ...

    def connection_lost(self, connection: Http1Connection) -> None: ...


class Http1Connection(BaseProtocol):
    """The protocol of one connection (``server`` makes it and knows it until it closes)."""

    # What aiohttp's request reads of its protocol.
    max_line_size = MAX_LINE
    max_field_size = MAX_FIELD
    max_headers = MAX_HEADERS

    def __init__(self, server: Serving) -> None:
        super().__init__(server.loop)
        self._server = server
        self._http = httptools.HttpRequestParser(self)
        self.ssl_context: Any = None
        self.peername: Any = None
        self.sockname: Any = None
        self._head = Head()
        self._error: BaseException | None = None  # raised in a parser callback
        self._sink: StreamReader | DeflateBuffer | None = None  # the body being read
        self._reading: StreamReader | None = None  # its payload
        self._skip = False  # the body being read is one its handler left
        self._queue: deque[tuple[RawRequestMessage, StreamReader]] = deque()
        self._serving: asyncio.Task[None] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # None while a request is being served
        self._closing = False  # no request after the one being served
        self._bad: BaseException | None = None  # answered with a 400 once the queue is served
        self._queue_paused = False

    # The transport's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Note the peer; wait for a head, at most the keep-alive timeout."""
        super().connection_made(transport)
        self.ssl_context = transport.get_extra_info("sslcontext")
        self.peername = transport.get_extra_info("peername")
        self.sockname = transport.get_extra_info("sockname")
        self._server.connection_made(self)
        self._wait_idle()

    def data_received(self, data: bytes) -> None:
        """Parse what came; a request that is not HTTP ends the connection with a 400."""
        if self._bad is not None or (self._closing and self._serving is None):
            return
        try:
            self._http.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._closing = True  # whatever follows is not HTTP/1.1: served no further
            self._pause_transport_reading()
        except httptools.HttpParserError as exc:
            error, self._error = self._error, None
            self._refuse(error or _as_aiohttp(exc))

    def eof_received(self) -> bool | None:
        """The client will send nothing more: the connection closes (as aiohttp's does)."""
        return None

    def connection_lost(self, exc: BaseException | None) -> None:
        """Cancel the request being served; fail a body still being read."""
        super().connection_lost(exc)
        self._server.connection_lost(self)
        self._cancel_idle()
        self._closing = True
        payload, self._reading, self._sink = self._reading, None, None
        if payload is not None and not payload.is_eof():
            lost = ConnectionResetError("the connection was lost")
            if exc is None:
                set_exception(payload, lost)
            else:
                set_exception(payload, lost, exc)
        self._queue.clear()
        if self._serving is not None:
            self._serving.cancel()

    def pause_reading(self) -> None:
        """A body's buffer is full (aiohttp's payload asks)."""
        self._reading_paused = True
        self._pause_transport_reading()

    def resume_reading(self, resume_parser: bool = True) -> None:
        """The handler read a body's buffer down."""
        self._reading_paused = False
        if not self._queue_paused:
            self._resume_transport_reading()

    # The parser's callbacks (httptools calls them by name).

    def on_message_begin(self) -> None:
        self._head = Head()

    def on_url(self, url: bytes) -> None:
        self._guarded(self._head.add_target, url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._guarded(self._head.add_header, name, value)

    def on_headers_complete(self) -> None:
        self._guarded(self._headed)

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is None or self._skip:
            return
        try:
            sink.feed_data(body, len(body))
        except Exception as exc:  # a body its Content-Encoding cannot decode
            self._failed_body(exc)

    def on_message_complete(self) -> None:
        sink, self._sink, self._reading = self._sink, None, None
        self._skip = False
        if sink is not None:
            try:
                sink.feed_eof()
            except Exception as exc:
                if isinstance(sink, DeflateBuffer):
                    set_exception(sink.out, RequestPayloadError(str(exc)), exc)

    # Serving.

    def _headed(self) -> None:
        http = self._http
        message = self._head.message(
            http.get_method(), http.get_http_version(), http.should_keep_alive()
        )
        if has_body(message):
            payload = StreamReader(self, PAYLOAD_LIMIT, loop=self._loop)
            self._reading = payload
            try:
                self._sink = (
                    DeflateBuffer(payload, message.compression) if message.compression else payload
                )
            except Exception as exc:  # a coding this installation cannot decode
                self._sink = payload
                self._failed_body(exc)
        else:
            payload = EMPTY_PAYLOAD
        self._queue.append((message, payload))
        self._idle_since = None
        if len(self._queue) > MAX_QUEUED:
            self._queue_paused = True
            self._pause_transport_reading()
        if self._serving is None:
            self._serving = self._loop.create_task(self._serve())

    async def _serve(self) -> None:
        """Serve the queued requests in order, then wait idle (or close)."""
        try:
            while self._queue and not self._closing_now():
                message, payload = self._queue.popleft()
                if self._queue_paused and len(self._queue) <= MAX_QUEUED // 2:
                    self._queue_paused = False
                    if not self._reading_paused:
                        self._resume_transport_reading()
                keep = await self._answer(message, payload)
                if not payload.is_eof() and payload is self._reading:
                    self._skip = True  # the handler left some of its body: read past it
                    payload.feed_eof()
                    self.resume_reading()
                if not keep:
                    self._closing = True
        finally:
            self._serving = None
        transport = self.transport
        if transport is None:
            return
        if self._bad is not None and not self._queue:
            transport.write(_BAD_REQUEST)
            transport.close()
        elif self._closing:
            transport.close()
        elif not self._queue:
            self._wait_idle()

    async def _answer(self, message: RawRequestMessage, payload: StreamReader) -> bool:
        """One request, answered; whether the connection may serve another."""
        server = self._server
        writer = StreamWriter(self, self._loop)
        task = cast("asyncio.Task[None]", asyncio.current_task())
        request = server.make_request(message, payload, self, writer, task)
        try:
            response = await server.handle(request)
        except web.HTTPException as exc:  # aiohttp's way: the exception is the answer
            response = exc
        except ConnectionError:
            return False  # the client has gone
        except Exception as exc:
            server.logger.exception("Error handling request from %s", request.remote, exc_info=exc)
            response = web.Response(status=500, text=_INTERNAL_ERROR)
            response.force_close()
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            return False
        transport = self.transport
        return (
            response.keep_alive is not False
            and transport is not None
            and not (transport.is_closing())
        )

    def _closing_now(self) -> bool:
        transport = self.transport
        return transport is None or transport.is_closing()

    # Closing.

    def close(self) -> None:
        """Serve no request after the current one (the runner stops); idle: close now."""
        self._closing = True
        if self._serving is None and self.transport is not None:
            self.transport.close()

    async def shutdown(self, timeout: float | None) -> None:
        """Give the request being served ``timeout`` s, then cancel it; close."""
        self._closing = True
        self._cancel_idle()
        serving = self._serving
        if serving is not None:
            await asyncio.wait({serving}, timeout=timeout)
            if not serving.done():
                serving.cancel()
                await asyncio.wait({serving}, timeout=1.0)
        if self.transport is not None:
            self.transport.close()

    def _refuse(self, exc: BaseException) -> None:
        """Not HTTP: one log line; a 400 once earlier requests are answered, then close."""
        self._bad = exc
        self._server.on_bad_request(self.peername[0] if self.peername else None, exc)
        self._pause_transport_reading()
        payload, self._reading, self._sink = self._reading, None, None
        if payload is not None and not payload.is_eof():
            set_exception(payload, RequestPayloadError("the request could not be read"), exc)
        if self._serving is None and self.transport is not None:
            self.transport.write(_BAD_REQUEST)
            self.transport.close()

    def _failed_body(self, exc: BaseException) -> None:
        payload = self._reading
        if payload is not None:
            set_exception(payload, RequestPayloadError(str(exc)), exc)
        self._skip = True

    def _wait_idle(self) -> None:
        """Idle from now on: closed after the keep-alive timeout unless a head comes. One
        timer, set when none is, checks the time when it fires (not one per request)."""
        now = self._idle_since = self._loop.time()
        timeout = self._server.keepalive_timeout
        if timeout and self._idle is None:
            self._idle = self._loop.call_at(now + timeout, self._idle_out)

    def _idle_out(self) -> None:
        self._idle = None
        since = self._idle_since
        if since is None or self.transport is None:
            return  # serving: the next idle time sets the timer again
        due = since + self._server.keepalive_timeout
        if self._loop.time() + 0.001 >= due:
            self.transport.close()
        else:
            self._idle = self._loop.call_at(due, self._idle_out)

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _guarded(self, step: Any, *args: Any) -> None:
        """Run a parser callback's step; keep its error for ``data_received``."""
        try:
            step(*args)
        except BaseException as exc:
            self._error = exc
            raise


def _as_aiohttp(exc: httptools.HttpParserError) -> BaseException:
    """httptools' parse error as the aiohttp error of the same kind (for the log line)."""
    if isinstance(exc, httptools.HttpParserInvalidMethodError):
        return BadHttpMethod("")
    if isinstance(exc, httptools.HttpParserInvalidURLError):
        return InvalidURLError("")
    return BadHttpMessage(type(exc).__name__)
