"""A real proxy worker under a slowloris at a front door: the strangers' connections that never
finish their head are closed (the excess at once, the rest at the head deadline) while the
owner's requests keep being answered.

The strangers connect from 127.0.0.2 (loopback, so ``PAIR_CONNECTION_LIMITS`` names 127.0.0.1
alone as the owner's address, which the caps never refuse).
"""

from __future__ import annotations

import asyncio

import aiohttp
import psutil
import pytest

from backend.common.connection_limits import LIMITS_ENV
from tests.integration.proxy.conftest import StartProxy

LIMITS = "per_peer=3,total=5,head_s=0.5,exempt=127.0.0.1"
PARTIAL_HEAD = b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n"


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            return await reader.read() == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_a_slowloris_at_a_door_is_shed_and_the_owner_is_served(
    start_proxy: StartProxy,
) -> None:
    proxy = await start_proxy(environment={LIMITS_ENV: LIMITS})
    url = proxy.url("ollama")
    port = int(url.rsplit(":", 1)[1])
    strangers = []
    for _ in range(12):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=("127.0.0.2", 0)
        )
        writer.write(PARTIAL_HEAD)
        strangers.append((reader, writer))
    async with aiohttp.ClientSession() as owner:
        over = [reader for reader, _ in strangers[3:]]
        assert all(await asyncio.gather(*(_closed_within(r, 2.0) for r in over)))
        for _ in range(5):
            async with owner.get(f"{url}/api/tags") as answer:
                assert answer.status == 200
        held = [reader for reader, _ in strangers[:3]]
        assert all(await asyncio.gather(*(_closed_within(r, 5.0) for r in held)))
        async with owner.get(f"{url}/api/tags") as answer:
            assert answer.status == 200
    for _, writer in strangers:
        writer.close()


async def test_the_worker_raises_its_open_file_limit(start_proxy: StartProxy) -> None:
    resource = pytest.importorskip("resource")
    if not hasattr(psutil.Process, "rlimit"):
        pytest.skip("psutil reads another process's limits on Linux only")
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = before[1]
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip("the hard limit leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))  # what the worker inherits
    try:
        proxy = await start_proxy()
        pid = await proxy.wait_serving()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    soft = psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)[0]
    assert soft > 512
