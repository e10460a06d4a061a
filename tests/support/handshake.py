"""What a WebSocket handshake over TLS got: the HTTP status or the kind of error refusing it."""

from __future__ import annotations

import ssl

import aiohttp


async def handshake_status(url: str, context: ssl.SSLContext) -> int | str:
    """101 when ``url`` upgraded, the HTTP status it refused with, or the error's class name."""
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            socket = await session.ws_connect(url)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            return type(exc).__name__
        await socket.close()
        return 101
