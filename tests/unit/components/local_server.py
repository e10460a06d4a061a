"""An aiohttp app served on a local port, with a client session to reach it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """``app`` on a free local port: its base URL and a client session, for the block."""
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield f"http://127.0.0.1:{server.port}", session
    finally:
        await server.close()
