"""Removal and leave: a removal is applied at once, reaches every member and the removed node,
is permanent across restarts and stale rosters; a node that leaves tells the members and may
come back with a new invite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from backend.components.cluster import roster as r
from backend.components.cluster.endorsements import Tombstone, prove_removal
from backend.components.cluster.members import MemberStore
from backend.components.identity.certificate import mint
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from tests.fakes import FakeClock
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    D_ID,
    Node,
    member_post,
    pair,
    restart,
    start_node,
    stop_node,
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[list[Node]]:
    """A, B and C in one cluster, each trusting the other two (A paired B, B paired C)."""
    clock = FakeClock(start=1_700_000_000.0)
    nodes = [
        await start_node(tmp_path, "desk", clock, A_ID),
        await start_node(tmp_path, "laptop", clock, B_ID),
        await start_node(tmp_path, "gpu-box", clock, C_ID),
    ]
    try:
        a, b, c = nodes
        await pair(a, b)
        await pair(b, c)
        await b.service.roster.push_all()
        assert a.trusts(c) and c.trusts(a)
        yield nodes
    finally:
        for node in nodes:
            await stop_node(node)


async def test_a_removal_reaches_every_member_and_the_removed_node_leaves(
    cluster: list[Node],
) -> None:
    a, b, c = cluster
    removed = await a.service.roster.remove(C_ID)
    assert removed.fingerprint == c.credentials.fingerprint
    # Applied here at once: no pin, a tombstone, the node API's pins followed.
    assert C_ID not in a.service.membership.members
    assert c.credentials.fingerprint in a.service.membership.removed
    assert not a.pinned.is_pinned(c.credentials.cert_der)

    await a.service.roster.push_all()  # B through the roster, C through the removal route

    assert C_ID not in b.service.membership.members and not b.pinned.is_pinned(
        c.credentials.cert_der
    )
    assert c.credentials.fingerprint in b.service.membership.removed
    status = c.service.status()
    assert status.cluster_id is None and status.members == [] and not c.pinned.pins
    assert status.removed is not None
    assert (status.removed.by, status.removed.by_name) == (A_ID, "desk")
    assert set(a.service.membership.members) == {B_ID}
    assert set(b.service.membership.members) == {A_ID}


async def test_a_removed_node_offline_hears_it_on_a_later_round(
    cluster: list[Node], tmp_path: Path
) -> None:
    a, _, c = cluster
    await c.runner.cleanup()  # C is away
    await a.service.roster.remove(C_ID)
    await a.service.roster.push_all()
    assert c.service.membership.clustered
    back = await restart(c, tmp_path)
    cluster[2] = back
    await a.service.roster.push_all()  # the proof is sent again until C has it
    assert back.service.status().removed is not None
    assert not back.service.membership.clustered


async def test_the_tombstone_survives_a_restart_and_a_stale_roster(
    cluster: list[Node], tmp_path: Path
) -> None:
    a, b, c = cluster
    stale = r.roster_of(b.service.membership, b.port)  # still lists C, endorsed by B
    assert C_ID in {entry.node_id for entry in stale.entries}
    await a.service.roster.remove(C_ID)

    a = cluster[0] = await restart(a, tmp_path)

    reloaded = await MemberStore(a.store).load()
    assert c.credentials.fingerprint in reloaded.removed
    assert reloaded.proofs[c.credentials.fingerprint].remover == A_ID
    status, _ = await member_post(b, a, r.ROSTER_PATH, msgspec.json.encode(stale))
    assert status == 200
    assert C_ID not in a.service.membership.members
    assert not a.pinned.is_pinned(c.credentials.cert_der)
    # The proof travels in A's roster, so B drops C too, and C's certificate cannot rejoin.
    await a.service.roster.push_all()
    assert C_ID not in b.service.membership.members
    with pytest.raises(errors.Conflict, match="never rejoin"):
        await a.service.invite("127.0.0.1", c.port)


async def test_remove_refuses_this_node_and_unknown_ones(cluster: list[Node]) -> None:
    a, _, _ = cluster
    with pytest.raises(errors.InvalidParams):
        await a.service.roster.remove(A_ID)
    with pytest.raises(errors.NotFound):
        await a.service.roster.remove(NodeId("ffffffff-0000-4000-8000-00000000000f"))


async def test_forged_removal_proofs_are_refused(cluster: list[Node]) -> None:
    a, b, c = cluster
    cluster_id = a.service.membership.cluster_id
    assert cluster_id is not None
    stranger = mint(NodeId("eeeeeeee-0000-4000-8000-00000000000e"))
    forged = prove_removal(
        stranger,
        B_ID,
        cluster_id,
        node_id=C_ID,
        fingerprint=c.credentials.fingerprint,
        removed_at=a.clock.now,
    )  # claims B, signed with another key
    genuine = prove_removal(
        b.credentials,
        B_ID,
        cluster_id,
        node_id=C_ID,
        fingerprint=c.credentials.fingerprint,
        removed_at=a.clock.now,
    )
    retargeted = msgspec.structs.replace(genuine, fingerprint=a.credentials.fingerprint)
    for proof in (forged, retargeted):
        body = msgspec.json.encode(r.RemovalNotice(proof=proof))
        status, _ = await member_post(b, a, r.REMOVE_PATH, body)
        assert status == 400
        assert a.service.membership.clustered and C_ID in a.service.membership.members
    roster = msgspec.structs.replace(
        r.roster_of(b.service.membership, b.port), tombstones=[Tombstone(proof=forged)]
    )
    await member_post(b, a, r.ROSTER_PATH, msgspec.json.encode(roster))
    assert C_ID in a.service.membership.members, "a forged tombstone in a roster is ignored"


async def test_a_node_that_leaves_tells_the_members_and_may_come_back(
    cluster: list[Node],
) -> None:
    a, b, c = cluster
    left = await b.service.roster.leave()

    assert sorted(left.told) == sorted([A_ID, C_ID]) and left.not_told == []
    assert not b.service.membership.clustered and not b.pinned.pins
    assert b.service.status().removed is None, "nobody removed it: it left"
    for node in (a, c):
        assert B_ID not in node.service.membership.members
        assert not node.pinned.is_pinned(b.credentials.cert_der)
    # A stale roster cannot bring it back...
    status, _ = await member_post(
        c, a, r.ROSTER_PATH, msgspec.json.encode(r.roster_of(c.service.membership, c.port))
    )
    assert status == 200 and B_ID not in a.service.membership.members
    # ...but a new invite does, and the roster carries it to the others.
    a.clock.now += 60
    await pair(a, b)
    await a.service.roster.push_all()
    assert c.trusts(b) and b.trusts(c)


async def test_a_proof_naming_this_node_in_a_roster_makes_it_leave(cluster: list[Node]) -> None:
    a, b, c = cluster
    cluster_id = a.service.membership.cluster_id
    assert cluster_id is not None
    proof = prove_removal(
        a.credentials,
        A_ID,
        cluster_id,
        node_id=C_ID,
        fingerprint=c.credentials.fingerprint,
        removed_at=a.clock.now,
    )
    roster = msgspec.structs.replace(
        r.roster_of(b.service.membership, b.port), tombstones=[Tombstone(proof=proof)]
    )
    status, _ = await member_post(b, c, r.ROSTER_PATH, msgspec.json.encode(roster))
    assert status == 409
    removed = c.service.status().removed
    assert removed is not None and removed.by == A_ID


async def test_a_removal_by_a_removed_member_reaches_a_node_that_never_knew_either(
    cluster: list[Node], tmp_path: Path
) -> None:
    a, b, c = cluster
    stale = r.roster_of(a.service.membership, a.port)  # lists B and C, endorsed by A
    await b.service.roster.remove(C_ID)
    await b.service.roster.push_all()
    await a.service.roster.remove(B_ID)
    await a.service.roster.push_all()
    assert not b.service.membership.clustered and not c.service.membership.clustered
    d = await start_node(tmp_path, "nas", a.clock, D_ID)
    try:
        await pair(a, d)
        await d.service.roster.push_all()  # A's answer carries both proofs, B's with a voucher
        removed = d.service.membership.removed
        assert {b.credentials.fingerprint, c.credentials.fingerprint} <= removed
        assert d.service.membership.proofs[c.credentials.fingerprint].remover == B_ID
        status, _ = await member_post(a, d, r.ROSTER_PATH, msgspec.json.encode(stale))
        assert status == 200
        assert set(d.service.membership.members) == {A_ID}, "the stale roster brings nobody back"
    finally:
        await stop_node(d)
