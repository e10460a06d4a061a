"""Passive observations of an engine's port: readiness/health probes and port occupancy."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from backend.components.engines.manifest import Probe


async def probe_http(session: aiohttp.ClientSession, host: str, port: int, probe: Probe) -> bool:
    """Whether ``GET http://host:port<probe.http>`` answers the expected status in time."""
    url = f"http://{_url_host(host)}:{port}{probe.http}"
    try:
        async with asyncio.timeout(probe.request_timeout_s), session.get(url) as response:
            return response.status == probe.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def port_in_use(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
