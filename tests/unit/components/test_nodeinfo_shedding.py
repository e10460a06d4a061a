"""The node API (TLS) under a slowloris from another address: a handshake that never starts and
heads that never end are closed at the deadline, connections past the caps at once, and this
computer's requests are answered throughout.

The stranger is 127.0.0.2 (still loopback, so ``PAIR_CONNECTION_LIMITS`` names 127.0.0.1 alone
as the owner's address).
"""

from __future__ import annotations

import asyncio
import ssl
import uuid

import pytest

from backend.common.connection_limits import LIMITS_ENV
from backend.common.tls import server_context
from backend.components.identity.certificate import mint
from backend.components.nodeinfo.server import NODE_INFO_PATH
from backend.protocol.types.base import NodeId
from tests.unit.components.test_nodeinfo_bad_requests import _client_context, _node_api

PARTIAL_HEAD = b"GET " + NODE_INFO_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n"
OWNER_GET = PARTIAL_HEAD + b"Connection: close\r\n\r\n"


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            return await reader.read() == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


async def _owner_answer(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_context())
    writer.write(OWNER_GET)
    async with asyncio.timeout(5):
        answer = await reader.readline()
    writer.close()
    return answer


async def test_a_slowloris_at_the_node_api_is_shed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMITS_ENV, "per_peer=2,total=3,head_s=2,exempt=127.0.0.1")
    context = server_context(mint(NodeId(str(uuid.uuid4()))), ())
    async with _node_api(context) as port:
        silent, _ = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        strangers = []
        for _ in range(5):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=_client_context(), local_addr=("127.0.0.2", 0)
            )
            writer.write(PARTIAL_HEAD)
            strangers.append((reader, writer))
        # Which two get in depends on the order the server finishes their handshakes.
        readers = [reader for reader, _ in strangers]
        closed = await asyncio.gather(*(_closed_within(r, 0.5) for r in readers))
        assert sum(closed) == 3, "past the caps: closed at once"
        assert (await _owner_answer(port)).startswith(b"HTTP/1.1 200")
        held = [
            reader for reader, was_closed in zip(readers, closed, strict=True) if not was_closed
        ]
        assert all(
            await asyncio.gather(*(_closed_within(r, 5.0) for r in [silent, *held]))
        )  # 2 s on
        assert (await _owner_answer(port)).startswith(b"HTTP/1.1 200")
        for _, writer in strangers:
            writer.close()
