"""Node-info's model inventories (``engines``) go only to trusted members, over mutual TLS, and
to this computer: anyone else gets the public part, and a removed member gets none, even on a
connection it opened while it was a member."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from backend.common import tls
from backend.components.nodeinfo.server import is_loopback
from backend.protocol.types.nodes import NodeEngineModels, NodeInfo
from tests.fakes import FakeClock
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    Node,
    anonymous_node_info,
    member_node_info,
    pair,
    start_node,
    stop_node,
)

ENGINES = {"ollama": NodeEngineModels(models=["private-model:7b"], loaded=["private-model:7b"])}


def _another_computer(_: str | None) -> bool:
    # The harness listens on loopback: this stands in for a client on another computer.
    return False


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[tuple[Node, Node, Node]]:
    """A (with an inventory, loopback not counted as itself), B paired with A, C a stranger."""
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(
        tmp_path, "desk", clock, A_ID, engines=ENGINES, this_computer=_another_computer
    )
    b = await start_node(tmp_path, "laptop", clock, B_ID)
    c = await start_node(tmp_path, "stranger", clock, C_ID)
    try:
        await pair(a, b)
        assert a.trusts(b) and b.trusts(a)
        yield a, b, c
    finally:
        for node in (a, b, c):
            await stop_node(node)


async def test_an_anonymous_client_gets_node_info_without_engines(
    nodes: tuple[Node, Node, Node],
) -> None:
    a, _, _ = nodes
    info = await anonymous_node_info(a)
    assert info.node_id == A_ID and info.engines is None
    assert info.ports.node == a.port and info.fingerprint == a.credentials.fingerprint


async def test_a_paired_member_over_mutual_tls_gets_engines(
    nodes: tuple[Node, Node, Node],
) -> None:
    a, b, _ = nodes
    assert (await member_node_info(b, a)).engines == ENGINES


async def test_a_certificate_the_node_did_not_pin_is_refused_and_learns_nothing(
    nodes: tuple[Node, Node, Node],
) -> None:
    a, _, c = nodes
    with pytest.raises(aiohttp.ClientError):
        await member_node_info(c, a)
    assert (await anonymous_node_info(a)).engines is None


async def test_a_removed_member_gets_no_engines_even_on_a_connection_kept_alive(
    nodes: tuple[Node, Node, Node],
) -> None:
    a, b, _ = nodes
    context = tls.client_context(b.credentials, a.credentials.cert_der)
    url = f"https://127.0.0.1:{a.port}/v1/node-info"
    # One pooled connection: its handshake was made while B was a member.
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        assert (await _get(session, url)).engines == ENGINES
        await a.service.roster.remove(B_ID)
        assert not a.pinned.is_pinned(b.credentials.cert_der)
        # The kept-alive connection still gets an answer, but the pin is checked per request.
        assert (await _get(session, url)).engines is None
    # A new mutual handshake is refused outright; anonymously B gets the public part only.
    with pytest.raises(aiohttp.ClientError):
        await member_node_info(b, a)
    assert (await anonymous_node_info(a)).engines is None


async def test_this_computer_gets_engines_without_a_certificate(tmp_path: Path) -> None:
    node = await start_node(tmp_path, "desk", FakeClock(), A_ID, engines=ENGINES)
    try:
        assert (await anonymous_node_info(node)).engines == ENGINES  # loopback is this computer
    finally:
        await stop_node(node)


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("127.0.0.1", True),
        ("127.0.0.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.0.2.2", False),
        ("10.78.0.11", False),
        ("::ffff:192.0.2.2", False),
        ("fe80::1%eth0", False),
        ("", False),
        (None, False),
        ("localhost", False),  # a client's address is never a name
    ],
)
def test_only_loopback_addresses_are_this_computer(address: str | None, local: bool) -> None:
    assert is_loopback(address) is local


async def _get(session: aiohttp.ClientSession, url: str) -> NodeInfo:
    async with session.get(url) as answer:
        assert answer.status == 200
        return msgspec.json.decode(await answer.read(), type=NodeInfo)
