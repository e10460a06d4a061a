"""Opening a member link: every address the member may be at, dialled at once.

A member is often listed at several addresses (the one discovery last reached, the one stored
at pairing, another interface's), and during an outage none of them answers: dialled one after
another, each taking the whole connect bound, they would keep a member that came back waiting
seconds per address. Dialled together, the first that opens the link wins (the others are
cancelled, or closed if they opened too), and one connect bound is all a try costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

import aiohttp

from backend.common.hostport import url_host
from backend.components.federation import websocket
from backend.components.federation.server import LINK_PATH

Socket = aiohttp.ClientWebSocketResponse


class LinkFailed(Exception):
    """No address of the member answered with a link."""


async def dial(
    session: aiohttp.ClientSession,
    context: ssl.SSLContext,
    addresses: Sequence[tuple[str, int]],
    *,
    timeout: float,
    path: str = LINK_PATH,
) -> Socket:
    """The WebSocket at ``path`` (the member link's by default) from the first of ``addresses``
    to open one within ``timeout``; raises ``LinkFailed`` with each address's reason when none
    did."""
    if not addresses:
        raise LinkFailed("no address is known")
    tries = [
        asyncio.ensure_future(_try(session, context, host, port, timeout, path))
        for host, port in addresses
    ]
    problems: list[str] = []
    try:
        for done in asyncio.as_completed(tries):
            outcome = await done
            if isinstance(outcome, str):
                problems.append(outcome)
                continue
            await _close_others(tries, outcome)
            return outcome
    finally:
        for task in tries:
            task.cancel()
        await asyncio.gather(*tries, return_exceptions=True)
    raise LinkFailed("; ".join(problems))


async def _close_others(tries: Sequence[asyncio.Future[Socket | str]], kept: Socket) -> None:
    """Cancel the tries still under way; close any other that opened a link too."""
    for task in tries:
        task.cancel()
    for outcome in await asyncio.gather(*tries, return_exceptions=True):
        if isinstance(outcome, Socket) and outcome is not kept:
            with contextlib.suppress(Exception):
                await outcome.close()


async def _try(
    session: aiohttp.ClientSession,
    context: ssl.SSLContext,
    host: str,
    port: int,
    timeout: float,
    path: str,
) -> Socket | str:
    """The WebSocket at ``path`` at one address, or why there is none."""
    url = f"wss://{url_host(host)}:{port}{path}"
    try:
        async with asyncio.timeout(timeout):
            return await session.ws_connect(
                url,
                ssl=context,
                max_msg_size=websocket.MAX_FRAME_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
            )
    except aiohttp.WSServerHandshakeError as exc:
        return f"{host}:{port} refused the link ({exc.status})"
    except (aiohttp.ClientSSLError, ssl.SSLError):
        return f"{host}:{port}: the TLS handshake failed (is this node a member?)"
    except aiohttp.ClientConnectorError as exc:
        reason = exc.os_error.strerror or str(exc.os_error) or "cannot connect"
        return f"{host}:{port}: {reason.lower()}"
    except TimeoutError:
        return f"{host}:{port}: no answer within {timeout:g} s"
    except (aiohttp.ClientError, OSError) as exc:
        return f"{host}:{port}: {str(exc) or type(exc).__name__}"
