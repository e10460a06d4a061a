"""A guarded aiohttp site under a slowloris: strangers' idle connections are closed at the head
deadline, their excess at once, and the owner's requests go on being answered.

The strangers connect from 127.0.0.2 and 127.0.0.3 (still loopback, so the limits name
127.0.0.1 alone as the owner's address, as ``PAIR_CONNECTION_LIMITS`` lets a test do).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from backend.common.connection_limits import ConnectionCounter, ConnectionLimits
from backend.core.guarded_site import ConnectionGuard, GuardedSite

LIMITS = ConnectionLimits(
    per_peer=4,
    total=6,
    head_timeout_s=1.5,
    keepalive_timeout_s=5.0,
    exempt=frozenset({"127.0.0.1"}),
)
PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("wait", "0")))
    return web.Response(text="ok")


@contextlib.asynccontextmanager
async def _site() -> AsyncIterator[tuple[str, ConnectionGuard]]:
    app = web.Application()
    app.router.add_get("/", _slow)
    runner = web.AppRunner(app, keepalive_timeout=LIMITS.keepalive_timeout_s, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    guard = ConnectionGuard("test door", ConnectionCounter(LIMITS), logging.getLogger("test.shed"))
    guarded = GuardedSite(runner, sock, guard)
    await guarded.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", guard
    finally:
        await runner.cleanup()


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, ConnectionGuard]]:
    async with _site() as started:
        yield started


async def _stranger(url: str, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(PARTIAL_HEAD)
    return reader, writer


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            return await reader.read() == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_a_slowloris_is_shed_while_the_owner_is_served(
    site: tuple[str, ConnectionGuard], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="test.shed"):
        await _slowloris(*site)
    _assert_logged(caplog)


def test_on_uvloop_too(caplog: pytest.LogCaptureFixture) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        async with _site() as started:
            await _slowloris(*started)

    with caplog.at_level(logging.INFO, logger="test.shed"):
        uvloop.run(main())
    _assert_logged(caplog)


async def _slowloris(url: str, guard: ConnectionGuard) -> None:
    """20 connections from 127.0.0.2 and 5 from 127.0.0.3 that never finish their head: the
    excess closes at once, the rest at the deadline; the owner is served meanwhile."""
    held = [await _stranger(url, "127.0.0.2") for _ in range(20)]
    more = [await _stranger(url, "127.0.0.3") for _ in range(5)]
    over = [reader for reader, _ in held[4:] + more[2:]]
    assert all(await asyncio.gather(*(_closed_within(r, 0.3) for r in over)))
    assert guard.counter.total == 6
    async with aiohttp.ClientSession() as owner:
        for _ in range(10):  # the owner gets in past both caps
            async with owner.get(url) as answer:
                assert answer.status == 200
    admitted = [reader for reader, _ in held[:4] + more[:2]]
    assert all(await asyncio.gather(*(_closed_within(r, 4.0) for r in admitted)))
    for _, writer in held + more:
        writer.close()
    await asyncio.sleep(0.05)
    assert guard.counter.total == 0


def _assert_logged(caplog: pytest.LogCaptureFixture) -> None:
    lines = [r.getMessage() for r in caplog.records if r.name == "test.shed"]
    assert 1 <= sum("over the limit" in line for line in lines) <= 2
    assert any("sent no complete request within 1.5 s" in line for line in lines)


async def test_a_request_whose_head_came_is_not_cut_by_the_deadline(
    site: tuple[str, ConnectionGuard],
) -> None:
    url, _ = site
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
    writer.write(b"GET /?wait=3.2 HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await asyncio.sleep(0.1)
    writer.write(b"\r\n")  # the head ends in its own packet
    async with asyncio.timeout(5):
        status = await reader.readline()
    assert status.startswith(b"HTTP/1.1 200")
    writer.close()
