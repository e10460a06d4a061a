"""Junk at a real worker's front door: a short line in the broker's log (the worker's stderr),
never a traceback or the payload, and the door still answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.proxy.conftest import StartProxy

MARK = b"JUNK-51c9"
JUNK = [
    b"\x00\x01" + MARK + b"\xff\r\n\r\n",
    b"G@T /" + MARK + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /" + MARK + b"A" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /api/tags HTTP/1.1\r\nHost: x\r\nBad\x01Header: " + MARK + b"\r\n\r\n",
]


async def _send(port: int, junk: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(junk)
        await writer.drain()
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(5):
                await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_junk_at_a_front_door_is_one_short_line(
    start_proxy: StartProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    proxy = await start_proxy()
    url = proxy.url("ollama")
    port = urlsplit(url).port
    assert port is not None
    for n in range(200):
        await _send(port, JUNK[n % len(JUNK)])
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(f"{url}/api/tags")
        await asyncio.sleep(0.5)  # the worker's stderr reaches the broker's log
    assert answer.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "backend.core.worker"]
    bad = [line for line in lines if "bad request from" in line]
    assert bad and all("front door ollama: bad request from 127.0.0.1: " in line for line in bad)
    assert len(bad) <= 3
    assert not any(MARK.decode() in line or "Traceback" in line for line in lines)
