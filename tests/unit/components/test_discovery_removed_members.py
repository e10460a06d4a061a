"""A member removed from the cluster takes its manual-node entry with it, on the node that removed
it and on every other member (each learns of the removal); other entries stay, and
``pair node remove`` still removes any entry by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from backend.common.tasks import TaskSet
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import entries_of_removed, manual_id
from backend.core.store import Store
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import ManualNode, ManualNodeAdd
from tests.fakes import FakeClock
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    Node,
    eventually,
    pair,
    start_node,
    stop_node,
)
from tests.unit.components.discovery_rig import discovery_of


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[list[tuple[Node, DiscoveryComponent]]]:
    """A, B and C in one cluster; A's and B's discoveries each hold an entry for the others."""
    clock = FakeClock(start=1_700_000_000.0)
    nodes = [
        await start_node(tmp_path, name, clock, node_id)
        for name, node_id in (("desk", A_ID), ("laptop", B_ID), ("gpu-box", C_ID))
    ]
    tasks = TaskSet("test:discoveries")
    async with AsyncExitStack() as stack:
        try:
            a, b, c = nodes
            await pair(a, b)
            await pair(b, c)
            await b.service.roster.push_all()
            watched = []
            for node in (a, b):
                store = Store(tmp_path / f"{node.name}-discovery.db")
                await store.open()
                stack.push_async_callback(store.close)
                discovery = discovery_of(node, store)
                for other in nodes:
                    if other is not node:
                        await discovery.add_manual(
                            ManualNodeAdd(address="127.0.0.1", port=other.port)
                        )
                stack.push_async_callback(discovery.stop)
                tasks.spawn(discovery.run(), name=f"discovery of {node.name}")
                watched.append((node, discovery))
            yield watched
        finally:
            await stack.aclose()
            await tasks.close(timeout=3.0)
            for node in nodes:
                await stop_node(node)


def entries(discovery: DiscoveryComponent) -> dict[str, NodeId | None]:
    return {entry.id: entry.node_id for entry in discovery.manual_nodes()}


async def test_removing_a_member_drops_its_entry_here_and_on_every_member(
    cluster: list[tuple[Node, DiscoveryComponent]],
) -> None:
    (a, at_a), (b, at_b) = cluster
    c_port = next(entry.port for entry in at_a.manual_nodes() if entry.port not in (a.port, b.port))
    gone, kept_at_a, kept_at_b = (
        manual_id("127.0.0.1", c_port),
        manual_id("127.0.0.1", b.port),
        manual_id("127.0.0.1", a.port),
    )
    # Each entry has answered as its node before the removal.
    await eventually(lambda: entries(at_a).get(gone) == C_ID and entries(at_b).get(gone) == C_ID)

    await a.service.roster.remove(C_ID)
    await a.service.roster.push_all()

    await eventually(lambda: gone not in entries(at_a) and gone not in entries(at_b))
    assert set(entries(at_a)) == {kept_at_a}
    assert set(entries(at_b)) == {kept_at_b}
    # An entry is still removed by hand, and a second removal says it is gone.
    await at_b.remove_manual(kept_at_b)
    assert entries(at_b) == {}
    with pytest.raises(errors.NotFound):
        await at_b.remove_manual(kept_at_b)


def _entry(port: int, node_id: str | None = None) -> ManualNode:
    return ManualNode(
        id=manual_id("10.0.0.7", port),
        address="10.0.0.7",
        port=port,
        added_at=0.0,
        state="unreachable",
        node_id=NodeId(node_id) if node_id is not None else None,
    )


def test_an_entry_goes_by_the_node_it_answered_as_or_the_address_the_member_had() -> None:
    answered, never_answered, other = _entry(1001, "gone"), _entry(1002), _entry(1003, "kept")
    addresses = {"gone": ("10.0.0.7", 1002), "kept": ("10.0.0.7", 1003)}
    found = entries_of_removed([answered, never_answered, other], {"gone"}, addresses)
    assert found == [answered.id, never_answered.id]
    assert entries_of_removed([answered, never_answered, other], set(), addresses) == []
