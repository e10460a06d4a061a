"""Roster reconciliation: a node paired through one member is trusted by every member, through
endorsements that verify; forged or conflicting entries are refused; renames converge."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from backend.common import tls
from backend.components.cluster import merge as mg
from backend.components.cluster import peer_client
from backend.components.cluster import roster as r
from backend.components.cluster.endorsements import (
    Endorsement,
    Tombstone,
    Voucher,
    endorse,
    prove_removal,
)
from backend.components.cluster.members import Member, Membership, applied
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
    anonymous_post,
    eventually,
    member_post,
    pair,
    run_component,
    start_node,
    stop_node,
)

Trio = tuple[Node, Node, Node]


@pytest.fixture
async def trio(tmp_path: Path) -> AsyncIterator[Trio]:
    """A, B and C, not paired yet."""
    clock = FakeClock(start=1_700_000_000.0)
    nodes = (
        await start_node(tmp_path, "desk", clock, A_ID),
        await start_node(tmp_path, "laptop", clock, B_ID),
        await start_node(tmp_path, "gpu-box", clock, C_ID),
    )
    try:
        yield nodes
    finally:
        for node in nodes:
            await stop_node(node)


async def _chain(a: Node, b: Node, c: Node) -> None:
    """A pairs B, then B pairs C (nobody pushes a roster yet)."""
    await pair(a, b)
    await pair(b, c)
    assert not a.trusts(c) and not c.trusts(a)


async def _post_roster(sender: Node, receiver: Node, roster: r.Roster) -> r.Roster:
    context = tls.client_context(sender.credentials, receiver.credentials.cert_der)
    return await peer_client.post(
        "127.0.0.1", receiver.port, r.ROSTER_PATH, roster, context, r.Roster
    )


def _roster_of(node: Node, *entries: r.RosterEntry) -> r.Roster:
    own = r.roster_of(node.service.membership, node.port)
    return msgspec.structs.replace(own, entries=[*own.entries, *entries])


async def test_one_round_makes_a_node_paired_through_one_member_trusted_by_all(
    trio: Trio,
) -> None:
    a, b, c = trio
    await _chain(a, b, c)

    await b.service.roster.push_all()  # B's one round: A learns C from B's push, C from it too

    assert a.trusts(c) and c.trusts(a)
    assert a.service.membership.members[C_ID].added_by == B_ID, "introduced by B"
    assert c.service.membership.members[A_ID].added_by == B_ID
    status, _ = await member_post(c, a, r.ROSTER_PATH, b"{}")
    assert status == 400, "A's node API lets C's certificate in (and refuses the empty body)"
    status, _ = await member_post(a, c, r.ROSTER_PATH, b"{}")
    assert status == 400
    # Every node vouches for what it pinned, so C stays verifiable if B is removed later.
    endorsers = [e.endorser for e in a.service.membership.members[C_ID].endorsements]
    assert endorsers == [B_ID, A_ID]


async def test_the_joiner_learns_the_cluster_from_the_answer_to_its_own_push(trio: Trio) -> None:
    a, b, c = trio
    await _chain(a, b, c)
    await c.service.roster.push_all()  # C → B; B answers with its roster, which names A
    assert c.trusts(a)


async def test_pushes_run_in_the_background_after_pairing(trio: Trio) -> None:
    a, b, c = trio
    for node in trio:
        await run_component(node)
    await _chain(a, b, c)
    await eventually(lambda: a.trusts(c) and c.trusts(a))
    assert all(len(node.service.membership.trusted()) == 2 for node in trio)


async def test_a_chain_in_one_roster_lands_in_one_merge(trio: Trio, tmp_path: Path) -> None:
    a, b, c = trio
    d = await start_node(tmp_path, "nas", a.clock, D_ID)
    try:
        await _chain(a, b, c)
        await pair(c, d)
        # B learns D from C, then passes both on: A verifies C through B, then D through C.
        await c.service.roster.push_all()
        assert b.trusts(d)
        await b.service.roster.push_all()
        assert a.trusts(c) and a.trusts(d)
        assert a.service.membership.members[D_ID].added_by == C_ID
    finally:
        await stop_node(d)


async def test_forged_endorsements_are_refused(trio: Trio) -> None:
    a, b, _ = trio
    await pair(a, b)
    cluster_id = a.service.membership.cluster_id
    assert cluster_id is not None
    d = mint(D_ID)
    stranger = mint(NodeId("eeeeeeee-0000-4000-8000-00000000000e"))
    now = a.clock.now

    def entry(endorsement: object) -> r.RosterEntry:
        return r.RosterEntry(
            node_id=D_ID,
            cert_der=d.cert_der,
            address="127.0.0.1",
            node_port=1,
            endorsements=[endorsement],  # type: ignore[list-item]
        )

    by_stranger = endorse(
        stranger, B_ID, cluster_id, node_id=D_ID, fingerprint=d.fingerprint, name="d", issued_at=now
    )  # claims B, signed with another key
    other_fingerprint = endorse(
        b.credentials,
        B_ID,
        cluster_id,
        node_id=D_ID,
        fingerprint=stranger.fingerprint,
        name="d",
        issued_at=now,
    )  # B's real signature, but over another certificate
    genuine = endorse(
        b.credentials,
        B_ID,
        cluster_id,
        node_id=D_ID,
        fingerprint=d.fingerprint,
        name="d",
        issued_at=now,
    )
    renamed = msgspec.structs.replace(genuine, name="not what B signed")
    other_cluster = endorse(
        b.credentials,
        B_ID,
        "another-cluster",
        node_id=D_ID,
        fingerprint=d.fingerprint,
        name="d",
        issued_at=now,
    )
    for forged in (by_stranger, other_fingerprint, renamed, other_cluster):
        await _post_roster(b, a, _roster_of(b, entry(forged)))
        assert D_ID not in a.service.membership.members, forged
    await _post_roster(b, a, _roster_of(b, entry(genuine)))
    assert D_ID in a.service.membership.members, "the genuine endorsement is accepted"


async def test_a_different_certificate_for_a_known_node_is_never_pinned(trio: Trio) -> None:
    a, b, c = trio
    await _chain(a, b, c)
    await b.service.roster.push_all()
    cluster_id = a.service.membership.cluster_id
    assert cluster_id is not None
    for node_id in (C_ID, A_ID, B_ID):  # another member, the receiver itself, the sender
        impostor = mint(node_id)
        endorsement = endorse(
            b.credentials,
            B_ID,
            cluster_id,
            node_id=node_id,
            fingerprint=impostor.fingerprint,
            name="impostor",
            issued_at=a.clock.now,
        )
        forged = r.RosterEntry(
            node_id=node_id,
            cert_der=impostor.cert_der,
            address="127.0.0.1",
            node_port=1,
            endorsements=[endorsement],
        )
        await _post_roster(b, a, _roster_of(b, forged))
        assert a.service.membership.pin_for(impostor.cert_der) is None
        assert not a.pinned.is_pinned(impostor.cert_der)
    assert a.service.membership.members[C_ID].cert_der == c.credentials.cert_der


async def test_only_members_reach_the_roster_and_removal_routes(trio: Trio) -> None:
    a, b, _ = trio
    await pair(a, b)
    for path in (r.ROSTER_PATH, r.REMOVE_PATH):
        status, answer = await anonymous_post(a, path, b"{}")
        assert status == 403 and "error" in answer  # type: ignore[operator]


async def test_malformed_roster_bodies_get_a_clean_400(trio: Trio) -> None:
    a, b, _ = trio
    await pair(a, b)
    cluster_id = a.service.membership.cluster_id
    good = msgspec.json.encode(_roster_of(b))
    bodies = [
        b"",
        b"{",
        b"[]",
        b"\xff\xfe",
        b'{"cluster_id": 5}',
        good.replace(b'"node_port"', b'"node_porty"'),  # unknown field
        msgspec.json.encode({**msgspec.to_builtins(_roster_of(b)), "entries": [{"node_id": 1}]}),
        b"x" * (r.MAX_ROSTER_BYTES + 10),
    ]
    for path in (r.ROSTER_PATH, r.REMOVE_PATH):
        for body in bodies:
            status, answer = await member_post(b, a, path, body)
            assert status == 400, (path, body[:30], status)
            assert "error" in answer  # type: ignore[operator]
    other = msgspec.structs.replace(_roster_of(b), cluster_id="another-cluster")
    status, _ = await member_post(b, a, r.ROSTER_PATH, msgspec.json.encode(other))
    assert status == 409
    status, answer = await member_post(b, a, r.ROSTER_PATH, good)
    assert status == 200 and answer["cluster_id"] == cluster_id  # type: ignore[index]


async def test_renames_propagate_and_the_newest_wins(trio: Trio) -> None:
    a, b, c = trio
    await _chain(a, b, c)
    await b.service.roster.push_all()
    for bad in ("", "   ", "x" * 65, "two\nlines"):
        with pytest.raises(errors.InvalidParams):
            await a.service.roster.rename(bad)
    await a.service.roster.rename("  Home lab ")
    a.clock.now += 5
    await c.service.roster.rename("Attic")  # later: wins wherever the two meet
    await a.service.roster.push_all()
    await c.service.roster.push_all()
    await b.service.roster.push_all()
    names = {node.service.membership.cluster_name for node in trio}
    assert names == {"Attic"}
    assert a.service.status().cluster_name == "Attic"


async def test_rename_and_leave_need_a_cluster(trio: Trio) -> None:
    a, _, _ = trio
    with pytest.raises(errors.Conflict):
        await a.service.roster.rename("Home")
    with pytest.raises(errors.Conflict):
        await a.service.roster.leave()


def test_merging_rosters_in_any_order_ends_in_the_same_membership() -> None:
    """The 2P-set property: R trusts A; A's news about B and C arrives in every order, and the
    removals hold whatever came first (even B's removal of C after B was removed)."""
    cluster_id = "k"
    r_id, e_id = NodeId("99999999-0000-4000-8000-000000000009"), D_ID
    creds = {node: mint(node) for node in (r_id, A_ID, B_ID, C_ID, e_id)}

    def endorsement(by: NodeId, of: NodeId, at: float = 1.0) -> Endorsement:
        return endorse(
            creds[by],
            by,
            cluster_id,
            node_id=of,
            fingerprint=creds[of].fingerprint,
            name=of[:4],
            issued_at=at,
        )

    def entry(of: NodeId, by: NodeId) -> r.RosterEntry:
        return r.RosterEntry(
            node_id=of,
            cert_der=creds[of].cert_der,
            address="h",
            node_port=1,
            endorsements=[endorsement(by, of)],
        )

    def removal(of: NodeId, by: NodeId, voucher_by: NodeId | None) -> Tombstone:
        proof = prove_removal(
            creds[by],
            by,
            cluster_id,
            node_id=of,
            fingerprint=creds[of].fingerprint,
            removed_at=2.0,
        )
        voucher = None
        if voucher_by is not None:
            voucher = Voucher(
                node_id=by,
                cert_der=creds[by].cert_der,
                endorsements=[endorsement(voucher_by, by)],
            )
        return Tombstone(proof=proof, remover=voucher)

    def roster(entries: list[r.RosterEntry], tombstones: list[Tombstone]) -> r.Roster:
        return r.Roster(
            cluster_id=cluster_id,
            cluster_name="x",
            node_port=1,
            entries=entries,
            tombstones=tombstones,
        )

    a = Member(
        node_id=A_ID,
        name="a",
        cert_der=creds[A_ID].cert_der,
        fingerprint=creds[A_ID].fingerprint,
        added_by=r_id,
        added_at=0.0,
        address="h",
        node_port=1,
        endorsements=(endorsement(r_id, A_ID),),
    )
    base = Membership(cluster_id=cluster_id, cluster_name="x", members={A_ID: a})
    own = r.Self(r_id, creds[r_id].fingerprint, creds[r_id].cert_der)
    news = [
        roster([entry(B_ID, A_ID)], []),
        roster([entry(C_ID, B_ID), entry(e_id, C_ID)], []),
        roster([], [removal(C_ID, B_ID, voucher_by=A_ID)]),  # B removed C...
        roster([], [removal(B_ID, A_ID, voucher_by=None)]),  # ...and A removed B
    ]
    outcomes = set()
    for order in itertools.permutations(news):
        membership = base
        for received in order:
            membership = applied(membership, mg.merge(membership, received, own, now=5.0).changes)
        outcomes.add((frozenset(membership.members), membership.removed))
    fingerprints = frozenset({creds[B_ID].fingerprint, creds[C_ID].fingerprint})
    # E, vouched for only by C, is in only if it arrived while C was trusted; a member that
    # pinned it then vouches for it itself, which is what carries it on in a real cluster.
    assert {(members - {e_id}, removed) for members, removed in outcomes} == {
        (frozenset({A_ID}), fingerprints)
    }
