"""Passive observations of an engine's port: readiness/health probes and port occupancy."""

from __future__ import annotations

import asyncio
from typing import Protocol

import aiohttp

from backend.common.hostport import url_host
from backend.components.engines.manifest import Probe
from backend.core.net import port_in_use

__all__ = ["HttpProbe", "PortCheck", "port_in_use", "probe_http"]


class HttpProbe(Protocol):
    """Whether the engine on ``host:port`` answers ``probe`` (``probe_http`` in production)."""

    async def __call__(
        self, session: aiohttp.ClientSession, host: str, port: int, probe: Probe
    ) -> bool: ...


class PortCheck(Protocol):
    """Whether anything accepts connections on ``host:port`` (``port_in_use`` in production)."""

    async def __call__(self, host: str, port: int) -> bool: ...


async def probe_http(session: aiohttp.ClientSession, host: str, port: int, probe: Probe) -> bool:
    """Whether ``GET http://host:port<probe.http>`` answers the expected status in time."""
    url = f"http://{url_host(host)}:{port}{probe.http}"
    try:
        async with asyncio.timeout(probe.request_timeout_s), session.get(url) as response:
            return response.status == probe.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
