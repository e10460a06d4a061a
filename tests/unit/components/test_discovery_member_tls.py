"""Discovery asks a trusted member for its node-info over mutual TLS (our certificate, only its
pinned one accepted) and so learns its inventory; a stranger, asked anonymously, tells none;
the contexts follow the membership as it changes."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.common.tasks import TaskSet
from backend.components.cluster.members import Member
from backend.components.discovery import probe
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.member_tls import MemberContexts
from backend.components.identity.certificate import mint
from backend.core.store import Store
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import DiscoveredNode, ManualNodeAdd, NodeEngineModels
from tests.fakes import FakeClock
from tests.support.ports import free_port
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
from tests.unit.components.discovery_rig import FAST, another_computer, discovery_of

B_ENGINES = {"ollama": NodeEngineModels(models=["member-model:1b"], loaded=[])}
C_ENGINES = {"ollama": NodeEngineModels(models=["stranger-model:1b"], loaded=[])}


@dataclass
class Cluster:
    a: Node  # whose discovery runs
    b: Node  # paired with A
    c: Node  # a stranger
    discovery: DiscoveryComponent

    def node(self, node_id: NodeId) -> DiscoveredNode | None:
        return next((n for n in self.discovery.nodes() if n.node_id == node_id), None)

    def shows(self, node_id: NodeId, check: Callable[[DiscoveredNode], bool]) -> bool:
        node = self.node(node_id)
        return node is not None and check(node)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, A_ID)
    b = await start_node(
        tmp_path, "laptop", clock, B_ID, engines=B_ENGINES, this_computer=another_computer
    )
    c = await start_node(
        tmp_path, "stranger", clock, C_ID, engines=C_ENGINES, this_computer=another_computer
    )
    store = Store(tmp_path / "discovery.db")
    await store.open()
    # A removed member's manual entry stays (as if it were found over mDNS): what is tested
    # here is which TLS each node is asked over.
    discovery = discovery_of(a, store, follow_removals=False)
    tasks = TaskSet("test:discovery")
    try:
        await pair(a, b)
        for other in (b, c):
            await discovery.add_manual(ManualNodeAdd(address="127.0.0.1", port=other.port))
        tasks.spawn(discovery.run(), name="discovery")
        yield Cluster(a, b, c, discovery)
    finally:
        await discovery.stop()
        await tasks.close(timeout=3.0)
        await store.close()
        for node in (a, b, c):
            await stop_node(node)


async def test_a_member_is_asked_over_mutual_tls_and_a_stranger_tells_no_inventory(
    cluster: Cluster,
) -> None:
    await eventually(lambda: cluster.shows(B_ID, lambda n: n.engines == B_ENGINES))
    await eventually(lambda: cluster.shows(C_ID, lambda n: n.reachable))
    # Polled again and again, the stranger never tells its inventory.
    await asyncio.sleep(FAST.telemetry_interval * 5)
    stranger = cluster.node(C_ID)
    assert stranger is not None and stranger.reachable and stranger.engines == {}
    member = cluster.node(B_ID)
    assert member is not None and member.engines == B_ENGINES and member.reachable


async def test_a_member_removed_here_is_polled_anonymously_again(cluster: Cluster) -> None:
    await eventually(lambda: cluster.shows(B_ID, lambda n: n.engines == B_ENGINES))
    await cluster.a.service.roster.remove(B_ID)
    # B still trusts A (it was not told), so only A's own choice keeps its certificate back.
    assert cluster.b.trusts(cluster.a)
    await eventually(lambda: cluster.shows(B_ID, lambda n: n.engines == {} and n.reachable))


async def test_a_member_that_unpinned_us_is_not_reached_and_no_anonymous_answer_counts(
    cluster: Cluster,
) -> None:
    await eventually(lambda: cluster.shows(B_ID, lambda n: n.engines == B_ENGINES))
    await cluster.b.service.roster.remove(A_ID)  # A is not told: it still trusts B
    assert B_ID in {m.node_id for m in cluster.a.service.membership.trusted()}
    # Out of routing (unreachable), and no anonymous answer in its name brings it back.
    await eventually(lambda: cluster.shows(B_ID, lambda n: not n.reachable))
    for _ in range(5):
        await asyncio.sleep(FAST.telemetry_interval)
        after = cluster.node(B_ID)
        assert after is not None and not after.reachable


def _member(node_id: NodeId, cert_der: bytes) -> Member:
    return Member(
        node_id=node_id,
        name="x",
        cert_der=cert_der,
        fingerprint="sha256:x",
        added_by=A_ID,
        added_at=0.0,
        address="127.0.0.1",
        node_port=1,
    )


def test_contexts_are_built_once_per_pin_and_follow_the_membership(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[NodeCredentials, bytes]] = []

    def client_context(credentials: NodeCredentials, der: bytes) -> ssl.SSLContext:
        built.append((credentials, der))
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    monkeypatch.setattr(tls, "client_context", client_context)
    ours, b_cert, b_new_cert = mint(A_ID), mint(B_ID).cert_der, mint(B_ID).cert_der
    members = [_member(B_ID, b_cert)]
    contexts = MemberContexts(ours, lambda: members)
    first = contexts.context_for(B_ID)
    assert first is not None and built == [(ours, b_cert)]
    assert contexts.context_for(B_ID) is first and len(built) == 1  # cached per pin
    assert contexts.context_for(C_ID) is None  # not a member: anonymous
    assert contexts.context_for(None) is None
    members[0] = _member(B_ID, b_new_cert)  # a new pin for the same node id
    renewed = contexts.context_for(B_ID)
    assert renewed is not None and renewed is not first and built[-1] == (ours, b_new_cert)
    members.clear()
    assert contexts.context_for(B_ID) is None
    members.append(_member(B_ID, b_new_cert))  # the old context went with the pin
    assert contexts.context_for(B_ID) is not renewed and len(built) == 3
    assert MemberContexts(None, lambda: members).context_for(B_ID) is None  # no certificate


async def test_a_refused_handshake_is_an_answer_and_a_closed_port_is_not_reached(
    cluster: Cluster,
) -> None:
    a, _, c = cluster.a, cluster.b, cluster.c
    unpinned = MemberContexts(a.credentials, lambda: [_member(C_ID, c.credentials.cert_der)])
    context = unpinned.context_for(C_ID)
    async with aiohttp.ClientSession() as session:
        # C never pinned A: its TLS refuses A's certificate, which is not "nobody there".
        with pytest.raises(probe.ProbeFailed) as refused:
            await probe.fetch_node_info(session, "127.0.0.1", c.port, tls_context=context)
        assert not isinstance(refused.value, probe.NotReached)
        with pytest.raises(probe.NotReached):
            await probe.fetch_node_info(session, "127.0.0.1", free_port(), tls_context=context)
