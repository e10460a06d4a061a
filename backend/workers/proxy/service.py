"""The proxy worker's serving loop: one aiohttp runner per front door on inherited sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from backend.components.proxy.targets import Door, ProxyTargets
from backend.workers.proxy.app import DoorContext, build_app

log = logging.getLogger(__name__)

CLEANUP_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 10.0


class ProxyService:
    """Owns the upstream session (one connection pool for all doors) and the door runners.

    The doors start serving only once the broker has sent the first targets; until then the
    kernel holds incoming connections in the listening sockets' backlog.
    """

    def __init__(self, fds: Mapping[Door, int]) -> None:
        self._fds = dict(fds)
        self._targets = ProxyTargets()
        self._have_targets = asyncio.Event()
        self._closing = asyncio.Event()
        self._sites: list[web.SockSite] = []

    def targets(self) -> ProxyTargets:
        """The engines as last told by the broker."""
        return self._targets

    def on_targets(self, params: Any) -> None:
        """``proxy/targets``: adopt the broker's view of the engines."""
        try:
            self._targets = msgspec.convert(params, ProxyTargets)
        except msgspec.ValidationError as exc:
            log.error("ignoring malformed proxy targets: %s", exc)
            return
        self._have_targets.set()

    def on_close_listeners(self, _: Any) -> None:
        """``proxy/close-listeners``: stop accepting; requests in flight go on."""
        self._closing.set()

    async def serve(self) -> None:
        """Serve every door until cancelled."""
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        ) as session:
            runners: list[web.AppRunner] = []
            try:
                await self._have_targets.wait()
                for door, fd in self._fds.items():
                    runners.append(await self._start_door(door, fd, session))
                log.info("serving front doors: %s", ", ".join(self._fds))
                await self._closing.wait()
                for site in self._sites:
                    await site.stop()
                await asyncio.Event().wait()
            finally:
                await asyncio.shield(_cleanup(runners))

    async def _start_door(
        self, door: Door, fd: int, session: aiohttp.ClientSession
    ) -> web.AppRunner:
        app = build_app(DoorContext(door, session, self.targets))
        # handler_cancellation: a client that hangs up cancels its handler, which closes the
        # upstream request so the engine frees the slot.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, socket.socket(fileno=fd))
        await site.start()
        self._sites.append(site)
        return runner


async def _cleanup(runners: list[web.AppRunner]) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLEANUP_TIMEOUT_S):
            for runner in runners:
                await runner.cleanup()
