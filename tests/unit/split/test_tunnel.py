"""The RPC tunnel (real mutual TLS on loopback, an echo server standing in for ``rpc-server``):
bytes go both ways in order, large and small; only a trusted member gets a tunnel; a member
removed while its tunnel is open is cut at once; no rpc-server, or no member, closes the local
connection promptly with a logged reason; the host's listener faces loopback only."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backend.common import tls
from backend.components.cluster import peer_client
from backend.components.identity.certificate import mint
from backend.components.split.tunnel import TUNNEL_PATH
from backend.components.split.tunnel_listener import MemberDialer, TunnelListener
from tests.support.handshake import handshake_status
from tests.support.ports import free_port
from tests.unit.cluster.harness import A_ID, C_ID, eventually
from tests.unit.split.tunnel_harness import Tunnels, closed_within, connect, tunnels


@pytest.fixture
async def pair_of(tmp_path: Path) -> AsyncIterator[Tunnels]:
    async with tunnels(tmp_path) as made:
        yield made


async def tunnel_status(made: Tunnels, context: ssl.SSLContext) -> int | str:
    """The HTTP status a tunnel attempt on B got, or the kind of error that refused it."""
    return await handshake_status(f"wss://127.0.0.1:{made.port}{TUNNEL_PATH}", context)


async def test_a_large_message_comes_back_whole_and_in_order(pair_of: Tunnels) -> None:
    reader, writer = await connect(pair_of.listener)
    payload = os.urandom(3 * 1024 * 1024 + 17)  # many frames: weights go like this at load
    writer.write(payload)
    echoed = await asyncio.wait_for(reader.readexactly(len(payload)), timeout=20)
    assert echoed == payload
    writer.close()


async def test_many_small_messages_keep_their_order_both_one_by_one_and_pipelined(
    pair_of: Tunnels,
) -> None:
    reader, writer = await connect(pair_of.listener)
    for number in range(200):  # request, answer, request: the RPC protocol's rhythm
        message = number.to_bytes(4, "big") + bytes([number % 251]) * (number % 40)
        writer.write(message)
        assert await asyncio.wait_for(reader.readexactly(len(message)), timeout=5) == message
    pipelined = b"".join(number.to_bytes(4, "big") for number in range(5000))
    for start in range(0, len(pipelined), 4):
        writer.write(pipelined[start : start + 4])
    assert await asyncio.wait_for(reader.readexactly(len(pipelined)), timeout=20) == pipelined
    writer.close()
    assert pair_of.echo.connections == 1


async def test_each_local_connection_is_its_own_tunnel(pair_of: Tunnels) -> None:
    first = await connect(pair_of.listener)
    second = await connect(pair_of.listener)
    first[1].write(b"first")
    second[1].write(b"second")
    assert await asyncio.wait_for(second[0].readexactly(6), timeout=5) == b"second"
    assert await asyncio.wait_for(first[0].readexactly(5), timeout=5) == b"first"
    assert pair_of.echo.connections == 2
    assert len(pair_of.tunnels) == 2
    first[1].close()
    second[1].close()


async def test_a_tunnel_holds_the_rpc_server_from_its_request_to_its_end(pair_of: Tunnels) -> None:
    reader, writer = await connect(pair_of.listener)
    writer.write(b"ping")
    assert await asyncio.wait_for(reader.readexactly(4), timeout=5) == b"ping"
    assert (pair_of.rpc_server.starts, pair_of.rpc_server.holds) == (1, 1)
    writer.close()
    await eventually(lambda: pair_of.rpc_server.holds == 0)


async def test_a_client_without_a_certificate_gets_403(pair_of: Tunnels) -> None:
    context = peer_client.pinned_anonymous_context(pair_of.b.credentials.cert_der)
    assert await tunnel_status(pair_of, context) == 403
    assert pair_of.echo.connections == 0


async def test_a_strangers_certificate_is_refused(pair_of: Tunnels) -> None:
    stranger = tls.client_context(mint(C_ID), pair_of.b.credentials.cert_der)
    refused = await tunnel_status(pair_of, stranger)
    # TLS 1.3 refuses the unknown certificate after the client's side of the handshake.
    assert isinstance(refused, str), f"a stranger's certificate got HTTP {refused}"
    assert pair_of.echo.connections == 0


async def test_a_member_gets_the_upgrade(pair_of: Tunnels) -> None:
    member = tls.client_context(pair_of.a.credentials, pair_of.b.credentials.cert_der)
    assert await tunnel_status(pair_of, member) == 101


async def test_a_member_removed_while_its_tunnel_is_open_is_cut_at_once(pair_of: Tunnels) -> None:
    reader, writer = await connect(pair_of.listener)
    writer.write(b"ping")
    assert await asyncio.wait_for(reader.readexactly(4), timeout=5) == b"ping"
    assert len(pair_of.tunnels) == 1
    await pair_of.b.service.roster.remove(A_ID)
    assert len(pair_of.tunnels) == 0
    assert await closed_within(reader, 1.0), "the removed member's tunnel stayed open"
    writer.close()
    again, _ = await connect(pair_of.listener)
    assert await closed_within(again, 5.0), "a removed member opened a new tunnel"
    assert pair_of.echo.connections == 1


async def test_an_rpc_server_that_cannot_run_closes_the_local_connection_with_a_logged_reason(
    pair_of: Tunnels, caplog: pytest.LogCaptureFixture
) -> None:
    pair_of.rpc_server.unavailable = "llama.cpp's rpc-server is not installed on this computer"
    caplog.set_level(logging.WARNING)
    reader, writer = await connect(pair_of.listener)
    assert await closed_within(reader, 5.0), "llama-server would hang on the tunnel"
    writer.close()
    assert "rpc-server is not installed on this computer" in caplog.text  # the member's log
    assert "rpc-tunnel:laptop not opened" in caplog.text  # the host's log
    assert "503" in caplog.text
    assert pair_of.rpc_server.holds == 0


async def test_an_rpc_server_gone_from_its_port_is_refused_with_the_reason(
    pair_of: Tunnels, caplog: pytest.LogCaptureFixture
) -> None:
    pair_of.rpc_server.port = free_port()
    caplog.set_level(logging.WARNING)
    reader, writer = await connect(pair_of.listener)
    assert await closed_within(reader, 5.0)
    writer.close()
    assert "cannot be reached" in caplog.text


async def test_an_unreachable_member_closes_the_local_connection_promptly(
    pair_of: Tunnels, caplog: pytest.LogCaptureFixture
) -> None:
    dialer = MemberDialer(pair_of.a.credentials, lambda member: [("127.0.0.1", free_port())])
    listener = TunnelListener(pair_of.b_as_seen_by_a(), dialer)
    await listener.start()
    try:
        reader, writer = await connect(listener)
        assert await closed_within(reader, 5.0), "llama-server would hang on the tunnel"
        writer.close()
    finally:
        await listener.close()
        await dialer.close()
    assert "not opened" in caplog.text


async def test_the_hosts_listener_faces_loopback_only(pair_of: Tunnels) -> None:
    assert pair_of.listener.port > 0
    for sock in pair_of.listener._server.sockets:  # type: ignore[union-attr]
        assert sock.getsockname()[0] == "127.0.0.1"


async def test_closing_the_listener_drops_the_connections_it_carries(pair_of: Tunnels) -> None:
    reader, writer = await connect(pair_of.listener)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), timeout=5) == b"x"
    await pair_of.listener.close()
    assert await closed_within(reader, 5.0)
    writer.close()
    with pytest.raises(ConnectionRefusedError):
        await connect(pair_of.listener)


async def test_an_rpc_server_that_stops_reading_stops_the_host_writing(pair_of: Tunnels) -> None:
    async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)
        writer.close()

    stalled_server = await asyncio.start_server(never_reads, "127.0.0.1", 0)
    pair_of.rpc_server.port = int(stalled_server.sockets[0].getsockname()[1])
    try:
        _, writer = await connect(pair_of.listener)
        chunk, written, limit = os.urandom(1024 * 1024), 0, 96 * 1024 * 1024
        while written < limit:
            writer.write(chunk)
            written += len(chunk)
            try:
                await asyncio.wait_for(writer.drain(), timeout=0.5)
            except TimeoutError:
                break  # the tunnel stopped taking bytes: backpressure reached llama-server
        # Socket buffers on three connections hold some megabytes; nothing else piles up.
        assert written < limit, "the tunnel kept buffering what rpc-server did not read"
        writer.transport.abort()
    finally:
        stalled_server.close()
        await pair_of.listener.close()
        await stalled_server.wait_closed()
