"""Serving an emulator app on a TCP port, in-process (tests) or in the foreground (CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable

from aiohttp import web

from backend.common.hostport import url_host

_SHUTDOWN_TIMEOUT = 5.0


class EmulatorServer:
    """Owns one emulator app's aiohttp runner and listening site.

    ``handler_cancellation`` is on so a client that disconnects cancels its request's handler:
    that is how the emulators notice disconnects while a request waits or generates.
    """

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port = port

    @property
    def url(self) -> str:
        """``http://host:port`` of the listening socket."""
        return f"http://{url_host(self._host)}:{self.port}"

    async def start(self) -> int:
        """Listen; returns the bound port (useful with port 0)."""
        runner = web.AppRunner(
            self._app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        self._runner = runner
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        sockets = runner.addresses
        self.port = int(sockets[0][1]) if sockets else self._port
        return self.port

    async def stop(self) -> None:
        """Close the listener and the app (idempotent, bounded)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SHUTDOWN_TIMEOUT):
                    await runner.cleanup()


async def serve_until_signalled(
    server: EmulatorServer, announce: Callable[[str], None] | None = None
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    if sys.platform != "win32":
        for signum in signals:
            loop.add_signal_handler(signum, stop.set)
    try:
        await server.start()
        if announce is not None:
            announce(server.url)
        await stop.wait()
    finally:
        if sys.platform != "win32":
            for signum in signals:
                loop.remove_signal_handler(signum)
        await server.stop()
