"""Discovery asks an IPv6 host at ``https://[addr]:port/...``: the node-info URL of ``::1``
reaches a node API listening there (unbracketed, the port would be read as part of the host)."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from backend.common import tls
from backend.components.discovery import probe
from backend.components.identity.certificate import mint
from backend.protocol.types.base import NodeId


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
async def node_api_on_ipv6_loopback() -> AsyncIterator[tuple[int, list[str]]]:
    """A node API on ``[::1]`` answering 404, with the Host header of every request."""
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    hosts: list[str] = []

    async def node_info(request: web.Request) -> web.StreamResponse:
        hosts.append(request.host)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get(probe.NODE_INFO_PATH, node_info)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = tls.server_context(mint(NodeId("eeeeeeee-0000-4000-8000-00000000000e")), ())
    site = web.TCPSite(runner, "::1", 0, ssl_context=context)
    await site.start()
    try:
        yield int(runner.addresses[0][1]), hosts
    finally:
        await runner.cleanup()


async def test_the_node_info_url_of_an_ipv6_host_is_bracketed(
    node_api_on_ipv6_loopback: tuple[int, list[str]],
) -> None:
    port, hosts = node_api_on_ipv6_loopback
    answered = f"https://[::1]:{port}/v1/node-info answered 404"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(probe.ProbeFailed, match=re.escape(answered)):
            await probe.fetch_node_info(session, "::1", port, timeout=5.0)
    assert hosts == [f"[::1]:{port}"]
