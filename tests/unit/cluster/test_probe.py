"""``cluster:probe``: who answers at an address before inviting it, and whether it can be."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backend.protocol import errors
from tests.fakes import FakeClock
from tests.unit.cluster.harness import A_ID, B_ID, Node, free_port, pair, start_node, stop_node


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, A_ID)
    b = await start_node(tmp_path, "laptop", clock, B_ID)
    try:
        yield a, b
    finally:
        for node in (a, b):
            await stop_node(node)


async def test_a_probe_names_the_node_and_says_whether_it_can_be_invited(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    found = await a.service.probe("127.0.0.1", b.port)
    assert (found.info.node_id, found.info.name, found.invitable) == (B_ID, "laptop", True)
    assert found.info.fingerprint == b.credentials.fingerprint and found.reason is None
    assert not a.service.status().invites, "a probe opens no invite"

    itself = await a.service.probe("127.0.0.1", a.port)
    assert not itself.invitable and itself.reason is not None and "this computer" in itself.reason

    await pair(a, b)
    member = await a.service.probe("127.0.0.1", b.port)
    assert not member.invitable
    assert member.reason == "laptop is already a member of this cluster"


async def test_nothing_answering_is_unavailable(nodes: tuple[Node, Node]) -> None:
    a, _ = nodes
    with pytest.raises(errors.Unavailable, match="no PAIR node answers"):
        await a.service.probe("127.0.0.1", free_port())
