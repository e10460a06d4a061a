"""A runner for one aiohttp application whose connections are ``Http1Connection``s.

``Http1Runner`` sets the application up and tears it down as aiohttp's ``AppRunner`` does;
its ``protocol`` makes each listener's connection (``GuardedSite`` takes it). Stopping closes
idle connections at once and gives the requests being served the runner's shutdown timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http import RawRequestMessage, StreamWriter
from aiohttp.streams import StreamReader

from backend.workers.proxy.http.connection import Http1Connection

BadRequestNote = Callable[[str | None, BaseException], None]


class Http1Server:
    """What a runner's connections share: its application's request factory and handler,
    the keep-alive timeout, the loggers; and the open connections, for shutdown."""

    def __init__(
        self,
        server: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        keepalive_timeout: float,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
        on_bad_request: BadRequestNote,
    ) -> None:
        self._server = server
        self.loop = loop
        self.keepalive_timeout = keepalive_timeout
        self.logger = logger
        self.on_bad_request = on_bad_request
        self.handle = server.request_handler
        self.connections: set[Http1Connection] = set()

    def make_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: Http1Connection,
        writer: StreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        """The application's request (aiohttp's factory types its protocol as its own)."""
        return self._server.request_factory(message, payload, cast(Any, protocol), writer, task)

    def __call__(self) -> Http1Connection:
        """A new connection's protocol."""
        return Http1Connection(self)

    def connection_made(self, connection: Http1Connection) -> None:
        """Know ``connection`` until it closes."""
        self.connections.add(connection)

    def connection_lost(self, connection: Http1Connection) -> None:
        """Forget ``connection``."""
        self.connections.discard(connection)

    def close_idle(self) -> None:
        """Close every connection between requests; the others after their request."""
        for connection in list(self.connections):
            connection.close()

    async def shutdown(self, timeout: float | None) -> None:
        """Give each request being served ``timeout`` s, then cancel it; close them all."""
        await asyncio.gather(*(c.shutdown(timeout) for c in list(self.connections)))
        self.connections.clear()


class Http1Runner(web.AppRunner):
    """``AppRunner`` serving ``app`` on ``Http1Connection``s (``protocol`` makes one).

    ``logger`` takes the handlers' crashes (aiohttp's server logger by default), and
    ``on_bad_request`` each request that is not HTTP."""

    def __init__(
        self,
        app: web.Application,
        *,
        keepalive_timeout: float = 75.0,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        on_bad_request: BadRequestNote | None = None,
        shutdown_timeout: float = 60.0,
    ) -> None:
        super().__init__(app, access_log=None, shutdown_timeout=shutdown_timeout)
        self._keepalive_timeout = keepalive_timeout
        self._logger = logger or logging.getLogger("aiohttp.server")
        self._on_bad_request = on_bad_request or _ignored
        self._http: Http1Server | None = None

    @property
    def protocol(self) -> Http1Server:
        """Makes a connection's protocol (once set up)."""
        if self._http is None:
            raise RuntimeError("the runner is not set up")
        return self._http

    async def setup(self) -> None:
        """Set the application up (its startup signals run here)."""
        await super().setup()
        server = self.server
        assert server is not None
        self._http = Http1Server(
            server,
            loop=asyncio.get_running_loop(),
            keepalive_timeout=self._keepalive_timeout,
            logger=self._logger,
            on_bad_request=self._on_bad_request,
        )

    async def shutdown(self) -> None:
        """The application's shutdown signals, then the connections' end (aiohttp's own
        server, which has none, follows)."""
        await super().shutdown()
        if self._http is not None:
            self._http.close_idle()
            await self._http.shutdown(self._shutdown_timeout)


def _ignored(peer: str | None, exc: BaseException) -> None:
    return None
