"""Where the front doors listen: on loopback only while LAN access is off, so another computer
cannot even connect, and on every address once it is on, switched live on the same ports while
the worker keeps serving. The relay listens on every address either way.

Another computer is played by connecting to this machine's own network address (not loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import msgspec
import pytest

from backend.components.proxy.component import ProxyComponent
from backend.core.clock import SystemClock
from backend.core.supervisor import Supervisor
from backend.protocol.proxy import ProxyTargets
from tests.fakes import RecordingErrors
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    QUICK_RESTARTS,
    RunningProxy,
    credentials_for,
    free_ports,
)
from tests.integration.proxy.lan_support import network_address_or_skip


@pytest.fixture
def lan_address() -> str:
    return network_address_or_skip()


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    """A supervised proxy whose doors follow the table's ``lan_access`` (no fixed host)."""
    errors, clock = RecordingErrors(), SystemClock()
    running = RunningProxy(
        component=ProxyComponent(
            ports=free_ports(),
            errors=errors,
            clock=clock,
            targets=lambda: running.targets,
            credentials=credentials_for(LOCAL_NODE),
            targets_interval=0.05,
        ),
        supervisor=Supervisor(errors=errors, clock=clock, policy=QUICK_RESTARTS),
        errors=errors,
        targets=ProxyTargets(node_id=LOCAL_NODE),
    )
    running.supervisor.add(running.component)
    running.supervisor.start()
    await running.wait_serving()
    yield running
    await running.component.close_front_doors()
    await running.supervisor.stop(grace=5.0)


async def _status(url: str) -> int | None:
    """The door's status for ``GET /api/tags``, or None when no connection is possible."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"{url}/api/tags") as answer,
        ):
            return answer.status
    except aiohttp.ClientConnectionError:
        return None


async def _until(url: str, wanted: int | None) -> None:
    async with asyncio.timeout(10):
        while await _status(url) != wanted:
            await asyncio.sleep(0.05)


def _accepts(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=2):
        return True
    return False


async def test_a_door_is_loopback_only_until_lan_access_is_turned_on(
    proxy: RunningProxy, lan_address: str
) -> None:
    port = proxy.component.ports()["ollama"]
    local, lan = f"http://127.0.0.1:{port}", f"http://{lan_address}:{port}"
    assert await _status(local) == 200
    assert await _status(lan) is None, "refused at connect: not even a socket to hold"
    relay = proxy.component.relay_port()
    assert relay is not None and _accepts(lan_address, relay), "members reach the relay"

    proxy.targets = msgspec.structs.replace(proxy.targets, lan_access=True)
    await _until(lan, 401)  # reachable; the gate asks for a key
    assert proxy.component.ports()["ollama"] == port
    assert await _status(local) == 200

    proxy.targets = msgspec.structs.replace(proxy.targets, lan_access=False)
    await _until(lan, None)
    assert await _status(local) == 200
    assert proxy.component.ports()["ollama"] == port
    assert not any("lan-binding" in error for error in proxy.errors.raised)


async def test_the_owner_is_served_throughout_a_switch(proxy: RunningProxy) -> None:
    url = proxy.url("openai")
    statuses: list[int] = []
    switching = True

    async def owner() -> None:
        # A new connection each time: each one is accepted by whichever socket listens then.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while switching:
                async with session.get(f"{url}/v1/models") as answer:
                    statuses.append(answer.status)
                await asyncio.sleep(0.005)

    async with asyncio.TaskGroup() as group:
        group.create_task(owner())
        for lan in (True, False, True, False):
            proxy.targets = msgspec.structs.replace(proxy.targets, lan_access=lan)
            await proxy.wait_table()
            await asyncio.sleep(0.2)
        switching = False
    assert len(statuses) > 10 and set(statuses) == {200}
