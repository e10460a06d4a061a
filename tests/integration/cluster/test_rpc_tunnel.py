"""The RPC tunnel's route on two real paired brokers: a member passes the gate and is told that
no rpc-server runs (503), a client without a certificate gets 403, and once removed the member
is refused in the TLS handshake.

Hosts as in ``test_three_nodes``: network namespaces on a bridge, or loopback addresses.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.identity.certificate import IdentityStore, vault_from
from backend.components.split.tunnel import TUNNEL_PATH
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


async def test_the_tunnel_route_is_for_members_and_says_when_no_rpc_server_runs(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    a = start_node(hosts[0], "a", "only-a:latest")
    b = start_node(hosts[1], "b", "only-b:latest")
    async with _clients(a, b) as (ca, cb):
        a_status = await ca.typed(methods.STATUS)
        b_port = (await cb.typed(methods.STATUS)).ports.node
        await _pair(ca, cb, b.host.address, b_port)
        as_a = tls.unverified_client_context(_credentials(a, a_status.node_id))
        anonymous = tls.unverified_client_context(None)
        assert await _tunnel_status(b.host.address, b_port, as_a) == 503
        assert await _tunnel_status(b.host.address, b_port, anonymous) == 403
        await cb.typed(methods.CLUSTER_REMOVE, MemberRef(node_id=a_status.node_id))
        refused = await _tunnel_status(b.host.address, b_port, as_a)
        assert isinstance(refused, str), f"a removed member got HTTP {refused}"
