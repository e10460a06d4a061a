"""Who may put an invite in front of the user: only while the join window is open, a few per
address, a bounded number held; no invite blocks another or the node's own; declining is
silent; the cluster id never leaves before the PAKE; lockouts count per invited computer; the
fingerprint shown is the certificate TLS presented."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from backend.components.cluster import admission
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.identity.certificate import mint
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import MembershipChanged
from tests.fakes import FakeClock
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    D_ID,
    Node,
    anonymous_post,
    pair,
    start_node,
    stop_node,
)

Trio = tuple[Node, Node, Node, FakeClock]


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Trio]:
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, A_ID)
    b = await start_node(tmp_path, "laptop", clock, B_ID)
    c = await start_node(tmp_path, "studio", clock, C_ID)
    try:
        yield a, b, c, clock
    finally:
        for node in (a, b, c):
            await stop_node(node)


def _offer(**changes: object) -> bytes:
    """A stranger's invite, as anyone on the network can send one."""
    stranger = NodeId("eeeeeeee-0000-4000-8000-00000000000e")
    offer = m.InviteOffer(
        invite_id=secrets.token_hex(16),
        node_id=stranger,
        name="vm",
        cert_der=secrets.token_bytes(600),
        node_port=9,
        expires_in_s=300,
    )
    return msgspec.json.encode(msgspec.structs.replace(offer, **changes))


async def _stranger_offers(node: Node, **changes: object) -> dict[str, str]:
    status, answer = await anonymous_post(node, m.INVITE_PATH, _offer(**changes))
    assert status == 200 and isinstance(answer, dict)
    return answer


async def test_a_closed_window_answers_not_accepting_and_shows_nothing(nodes: Trio) -> None:
    a, b, _, _ = nodes
    answer = await _stranger_offers(b)
    assert answer["state"] == "not-accepting"
    created = await a.service.invite("127.0.0.1", b.port)
    assert created.invite.state == "not-accepting" and created.pin == ""
    # The inviter's user is told what to do on the other computer.
    assert "Join a cluster" in (created.invite.reason or "")
    assert "pair join" in (created.invite.reason or "")
    assert not b.invites() and not b.service.status().invites
    # Nothing waits at the inviter either: it may invite again at once.
    b.service.open_join_window(10)
    assert (await a.service.invite("127.0.0.1", b.port)).invite.state == "pending"


async def test_the_window_closes_on_time_by_the_user_and_after_pairing(nodes: Trio) -> None:
    a, b, _, clock = nodes
    window = b.service.open_join_window(10).window
    assert window is not None and window.closes_at == clock.now + 600
    assert b.service.status().join_window == window
    assert isinstance(b.published[-1], MembershipChanged)  # screens learn it opened
    clock.now += 601
    await b.service.expire()
    assert b.service.status().join_window is None
    assert (await _stranger_offers(b))["state"] == "not-accepting"

    b.service.open_join_window(5)
    assert b.service.close_join_window().window is None
    assert (await _stranger_offers(b))["state"] == "not-accepting"

    await pair(a, b)  # opens b's window, then pairs
    assert b.service.status().join_window is None


@pytest.mark.parametrize("minutes", [0, 0.5, 16, 60])
async def test_a_window_lasts_one_to_fifteen_minutes(nodes: Trio, minutes: float) -> None:
    _, b, _, _ = nodes
    with pytest.raises(errors.InvalidParams, match="1 to 15 minutes"):
        b.service.open_join_window(minutes)


async def test_offers_from_one_address_are_rate_limited(nodes: Trio) -> None:
    _, b, _, clock = nodes
    b.service.open_join_window(15)
    states = [(await _stranger_offers(b))["state"] for _ in range(admission.OFFERS_PER_SOURCE + 2)]
    assert states[: admission.OFFERS_PER_SOURCE] == ["pending"] * admission.OFFERS_PER_SOURCE
    assert states[admission.OFFERS_PER_SOURCE :] == ["busy", "busy"]
    assert len(b.invites()) == admission.OFFERS_PER_SOURCE  # the refused ones showed nothing
    clock.now += admission.SOURCE_PERIOD_S
    assert (await _stranger_offers(b))["state"] == "pending"


async def test_held_invites_are_capped_and_ended_ones_make_room(nodes: Trio) -> None:
    _, b, _, clock = nodes
    b.service.open_join_window(15)
    for n in range(admission.MAX_HELD):
        # Slower than the rate limit: only the cap counts.
        clock.now += admission.SOURCE_PERIOD_S / admission.OFFERS_PER_SOURCE + 0.5
        assert (await _stranger_offers(b))["state"] == "pending", n
    clock.now += admission.SOURCE_PERIOD_S
    full = await _stranger_offers(b)
    assert full["state"] == "busy" and "too many open invites" in full["reason"]
    first = b.service.status().invites[0]
    await b.service.decline(first.id)
    clock.now += admission.SOURCE_PERIOD_S
    assert (await _stranger_offers(b))["state"] == "pending"  # the ended one made room
    assert len(b.service.status().invites) == admission.MAX_HELD


async def test_ended_invites_are_forgotten_after_a_minute(nodes: Trio) -> None:
    _, b, _, clock = nodes
    assert not b.service.has_deadlines()  # nothing to expire: the invite clock rests
    b.service.open_join_window(15)
    assert b.service.deadline_added.is_set() and b.service.has_deadlines()
    await _stranger_offers(b)
    await b.service.decline(b.service.status().invites[0].id)
    clock.now += admission.ENDED_KEEP_S
    await b.service.expire()
    assert not b.service.status().invites
    assert b.service.has_deadlines()  # the window is still open
    clock.now += 15 * 60
    await b.service.expire()
    assert b.service.status().join_window is None and not b.service.has_deadlines()


async def test_open_invites_block_neither_another_nor_the_nodes_own(nodes: Trio) -> None:
    a, b, c, _ = nodes
    b.service.open_join_window(10)
    assert (await _stranger_offers(b))["state"] == "pending"  # never answered
    from_a = await a.service.invite("127.0.0.1", b.port)
    assert from_a.invite.state == "pending", from_a.invite.reason
    c.service.open_join_window(10)
    own = await b.service.invite("127.0.0.1", c.port)  # b's own invite goes out meanwhile
    assert own.invite.state == "pending", own.invite.reason
    await b.service.cancel(own.invite.id)
    from_c = await c.service.invite("127.0.0.1", b.port)
    assert from_c.invite.state == "pending", from_c.invite.reason
    # The user picks one; the others end (this computer is in a cluster now).
    joined = await b.service.accept(from_a.invite.id, from_a.pin)
    assert joined.state == "paired"
    states = {i.peer_name: i.state for i in b.service.status().invites if i.direction == "incoming"}
    assert states == {"vm": "declined", "desk": "paired", "studio": "declined"}


async def test_the_cluster_id_travels_only_in_the_sealed_box(nodes: Trio) -> None:
    a, b, c, _ = nodes
    await pair(a, b)
    cluster_id = a.service.membership.cluster_id
    assert cluster_id is not None
    c.service.open_join_window(10)
    created = await a.service.invite("127.0.0.1", c.port)
    received = c.service._joining.incoming.pending(created.invite.id).offer
    wire = msgspec.json.encode(received)
    assert cluster_id.encode() not in wire and b"cluster_id" not in wire
    assert received.cluster_tag is not None
    # A member of the cluster recognises the tag; the same tag with another certificate (an
    # impostor replaying it) is rejected.
    b.service.open_join_window(10)
    replayed = _offer(invite_id=received.invite_id, cluster_tag=received.cluster_tag)
    assert (await _stranger_offers(b, **_fields(replayed)))["state"] == "rejected"
    offer = msgspec.json.decode(_offer(), type=m.InviteOffer)
    tag = pc.cluster_tag(cluster_id, bytes.fromhex(offer.invite_id), offer.cert_der)
    assert (await _stranger_offers(b, **_fields(offer, cluster_tag=tag)))["state"] == "pending"


def _fields(offer: bytes | m.InviteOffer, **changes: object) -> dict[str, object]:
    if isinstance(offer, bytes):
        offer = msgspec.json.decode(offer, type=m.InviteOffer)
    fields = {name: getattr(offer, name) for name in m.InviteOffer.__struct_fields__}
    return fields | changes


async def test_an_impostors_wrong_pins_do_not_lock_out_the_real_computer(nodes: Trio) -> None:
    a, b, c, clock = nodes
    c.service.open_join_window(15)
    for _ in range(3):  # c answers every invite with a wrong PIN
        created = await a.service.invite("127.0.0.1", c.port)
        wrong = f"{(int(created.pin) + 7) % 1_000_000:06d}"
        assert (await c.service.accept(created.invite.id, wrong)).state == "wrong-pin"
        clock.now += 10
    assert (await a.service.invite("127.0.0.1", c.port)).invite.state == "locked-out"
    b.service.open_join_window(10)
    real = await a.service.invite("127.0.0.1", b.port)
    assert real.invite.state == "pending", real.invite.reason
    assert real.invite.peer_fingerprint == b.credentials.fingerprint


async def test_a_joiner_with_another_certificate_than_invited_is_refused(nodes: Trio) -> None:
    a, b, _, _ = nodes
    b.service.open_join_window(10)
    created = await a.service.invite("127.0.0.1", b.port)
    other = mint(D_ID)
    start = m.Start(
        invite_id=created.invite.id,
        sid=bytes(16),
        share=b"\x09" + bytes(31),
        ad=m.associated_data(b.node_id, other.fingerprint),
    )
    status, answer = await anonymous_post(a, m.START_PATH, msgspec.json.encode(start))
    assert (status, answer["state"]) == (200, "failed")  # type: ignore[index]
    assert a.invites()[-1].invite.state == "failed"
