"""The RPC tunnel's route on two real paired brokers: a member passes the gate and gets its
tunnel to an rpc-server started for it (or 503 saying why it cannot run: llama.cpp's rpc-server
is not installed), a client without a certificate gets 403, and once removed the member is
refused in the TLS handshake. The rpc-server listens on loopback only and dies with its broker.

Hosts as in ``test_three_nodes``: network namespaces on a bridge, or loopback addresses.
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.engines.rpc_binary import rpc_server_path
from backend.components.identity.certificate import IdentityStore, vault_from
from backend.components.split.tunnel import TUNNEL_PATH
from backend.devtools.llama_server import search_llama_server
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import MemberRef
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    hosts,
    start_node,
)
from tests.support.handshake import handshake_status

__all__ = ["hosts", "start_node"]  # fixtures


async def _tunnel_status(address: str, port: int, context: ssl.SSLContext) -> int | str:
    return await handshake_status(f"wss://{address}:{port}{TUNNEL_PATH}", context)


def _credentials(node: Node, node_id: NodeId) -> NodeCredentials:
    return IdentityStore(node.data_dir, vault_from(os.environ)).load(node_id).credentials


def _installed_rpc_server() -> Path | None:
    """The rpc-server beside the llama-server a broker here detects, if there is one."""
    llama_server = search_llama_server().binary
    return None if llama_server is None else rpc_server_path(llama_server)


def _rpc_servers_of(node: Node) -> list[psutil.Process]:
    broker = psutil.Process(node.broker.process.pid)
    return [child for child in broker.children(recursive=True) if "rpc-server" in child.name()]


async def test_the_tunnel_route_is_for_members_and_starts_rpc_server_or_says_why_not(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    installed = await asyncio.to_thread(_installed_rpc_server)
    a = start_node(hosts[0], "a", "only-a:latest")
    b = start_node(hosts[1], "b", "only-b:latest")
    async with _clients(a, b) as (ca, cb):
        a_status = await ca.typed(methods.STATUS)
        b_port = (await cb.typed(methods.STATUS)).ports.node
        await _pair(ca, cb, b.host.address, b_port)
        as_a = tls.unverified_client_context(_credentials(a, a_status.node_id))
        anonymous = tls.unverified_client_context(None)
        assert await _tunnel_status(b.host.address, b_port, as_a) == (101 if installed else 503)
        assert await _tunnel_status(b.host.address, b_port, anonymous) == 403
        await cb.typed(methods.CLUSTER_REMOVE, MemberRef(node_id=a_status.node_id))
        refused = await _tunnel_status(b.host.address, b_port, as_a)
        assert isinstance(refused, str), f"a removed member got HTTP {refused}"


async def test_a_members_rpc_server_starts_for_a_tunnel_on_loopback_and_dies_with_its_broker(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    if await asyncio.to_thread(_installed_rpc_server) is None:
        pytest.skip("llama.cpp's rpc-server is not installed beside llama-server")
    a = start_node(hosts[0], "a", "only-a:latest")
    b = start_node(hosts[1], "b", "only-b:latest")
    async with _clients(a, b) as (ca, cb):
        a_status = await ca.typed(methods.STATUS)
        b_port = (await cb.typed(methods.STATUS)).ports.node
        await _pair(ca, cb, b.host.address, b_port)
        assert _rpc_servers_of(b) == []  # not before a tunnel asks for it
        as_a = tls.unverified_client_context(_credentials(a, a_status.node_id))
        assert await _tunnel_status(b.host.address, b_port, as_a) == 101
        (rpc_server,) = _rpc_servers_of(b)
        argv = rpc_server.cmdline()
        assert argv[argv.index("-H") + 1] == "127.0.0.1"
        with pytest.raises(ConnectionRefusedError):  # not on the member's LAN address
            await asyncio.open_connection(b.host.address, int(argv[argv.index("-p") + 1]))
    b.broker.process.send_signal(signal.SIGKILL)  # no shutdown: the kernel ends rpc-server
    gone, _ = await asyncio.to_thread(psutil.wait_procs, [rpc_server], 10)
    assert gone, "rpc-server outlived its broker"
