"""On a public network (the ``public_network`` setting) the node API answers a stranger with a
refusal and nothing else, and refuses its invites; members over their pinned TLS and this
computer are served as before, the owner can still invite, and the setting applies at once."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backend.components.cluster import messages, peer_client
from backend.components.nodeinfo import server
from backend.components.nodeinfo.public_network import REFUSAL
from backend.protocol import errors
from tests.fakes import FakeClock
from tests.unit.cluster import harness
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    D_ID,
    Node,
    anonymous_node_info,
    anonymous_post,
    member_node_info,
    pair,
    start_node,
    stop_node,
)

PUBLIC = {"on": False}


def _another_computer(_: str | None) -> bool:
    return False


@pytest.fixture
async def nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Node, Node, Node, Node]]:
    """A on the public network (to its clients, another computer), B its member, C a stranger,
    O on the public network too, with loopback as its owner."""
    PUBLIC["on"] = False
    build = functools.partial(server.build_app, public_network=lambda: PUBLIC["on"])
    monkeypatch.setattr(harness, "build_app", build)
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, A_ID, this_computer=_another_computer)
    b = await start_node(tmp_path, "laptop", clock, B_ID)
    c = await start_node(tmp_path, "stranger", clock, C_ID)
    owned = await start_node(tmp_path, "own", clock, D_ID)
    try:
        await pair(a, b)
        PUBLIC["on"] = True
        yield a, b, c, owned
    finally:
        for node in (a, b, c, owned):
            await stop_node(node)


async def _anonymous_get(node: Node, path: str) -> tuple[int, Any]:
    context = peer_client.pinned_anonymous_context(node.credentials.cert_der)
    url = f"https://127.0.0.1:{node.port}{path}"
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        session.get(url) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def test_a_stranger_gets_a_refusal_and_nothing_else(
    nodes: tuple[Node, Node, Node, Node],
) -> None:
    a, _, _, _ = nodes
    for path in ("/v1/node-info", "/anything"):
        assert await _anonymous_get(a, path) == (403, {"error": REFUSAL})


async def test_a_strangers_invite_is_refused_and_never_reaches_the_owner(
    nodes: tuple[Node, Node, Node, Node],
) -> None:
    a, _, c, _ = nodes
    with pytest.raises(errors.RpcError):
        await c.service.invite("127.0.0.1", a.port)
    status, answer = await anonymous_post(a, messages.INVITE_PATH, b"{}")
    assert (status, answer) == (403, {"error": REFUSAL})
    assert [i for i in a.service.status().invites if i.direction == "incoming"] == []


async def test_members_and_this_computer_are_served_and_the_owner_can_still_invite(
    nodes: tuple[Node, Node, Node, Node],
) -> None:
    a, b, c, owned = nodes
    assert (await member_node_info(b, a)).node_id == A_ID
    assert (await anonymous_node_info(owned)).node_id == D_ID  # loopback: its owner
    await pair(a, c)  # the joiner's messages of A's own invite still pass
    assert a.trusts(c) and (await member_node_info(c, a)).node_id == A_ID


async def test_turning_the_setting_off_serves_strangers_again_at_once(
    nodes: tuple[Node, Node, Node, Node],
) -> None:
    a, _, _, _ = nodes
    assert (await _anonymous_get(a, "/v1/node-info"))[0] == 403
    PUBLIC["on"] = False
    assert (await anonymous_node_info(a)).node_id == A_ID
