"""The developer tools (``pair demo``, the soak) wait for a broker's ``app:ready``, not for its
first answer: a broker answers ``ping`` before its components run, and an engine command sent
then fails. A scripted control socket stands in for the broker."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.devtools.demo import wait_broker_ready
from backend.protocol.endpoint import control_address

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a Unix socket stands in")

READY: dict[str, object] = {
    "jsonrpc": "2.0",
    "method": "app:ready",
    "params": {"version": "0", "node_name": "pc"},
}
OTHER: dict[str, object] = {"jsonrpc": "2.0", "method": "log:entry", "params": {}}


async def _serve(data_dir: Path, pushes: list[tuple[float, dict[str, object]]]) -> asyncio.Server:
    """A control socket that sends each client ``pushes`` (after their delays in s) and
    answers nothing."""

    async def client(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for delay, push in pushes:
            await asyncio.sleep(delay)
            writer.write(json.dumps(push).encode() + b"\n")
            await writer.drain()
        await asyncio.sleep(30)

    return await asyncio.start_unix_server(client, control_address(data_dir))


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    Path(control_address(tmp_path)).unlink(missing_ok=True)


async def test_it_returns_once_the_broker_says_it_is_ready(data_dir: Path) -> None:
    server = await _serve(data_dir, [(0.05, OTHER), (0.3, READY)])
    async with server:
        began = time.monotonic()
        await wait_broker_ready(data_dir, timeout=10)
        assert time.monotonic() - began >= 0.3  # not at connect, nor at another push


async def test_a_broker_that_never_becomes_ready_times_out(data_dir: Path) -> None:
    server = await _serve(data_dir, [(0.0, OTHER)])
    async with server:
        with pytest.raises(TimeoutError):
            await wait_broker_ready(data_dir, timeout=0.5)


async def test_no_broker_is_an_os_error(data_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):  # no socket there
        await wait_broker_ready(data_dir, timeout=0.5)
