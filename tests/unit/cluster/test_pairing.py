"""Pairing two nodes end to end in one process: real node APIs over TLS on loopback, real
SQLite stores, the real PAKE; a man in the middle that terminates TLS with its own certificate."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp import web

from backend.common import tls
from backend.components.cluster import messages as m
from backend.components.cluster import peer_client
from backend.components.cluster.members import Members, MemberStore
from backend.components.identity.certificate import mint
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from tests.fakes import FakeClock
from tests.unit.cluster.harness import Node, free_port, start_node, stop_node


async def _start_node(tmp_path: Path, name: str, clock: FakeClock, uuid: str) -> Node:
    return await start_node(tmp_path, name, clock, NodeId(uuid))


@pytest.fixture
async def pair_of_nodes(tmp_path: Path) -> AsyncIterator[tuple[Node, Node, FakeClock]]:
    clock = FakeClock(start=1_700_000_000.0)
    a = await _start_node(tmp_path, "desk", clock, "aaaaaaaa-0000-4000-8000-000000000001")
    b = await _start_node(tmp_path, "laptop", clock, "bbbbbbbb-0000-4000-8000-000000000002")
    try:
        yield a, b, clock
    finally:
        for node in (a, b):
            await stop_node(node)


async def _invite(a: Node, b: Node) -> tuple[str, str]:
    b.service.open_join_window(10)
    created = await a.service.invite("127.0.0.1", b.port)
    assert created.invite.state == "pending", created.invite.reason
    return created.invite.id, created.pin


async def _members_route(client: Node, server: Node, *, with_cert: bool) -> int:
    """The status of a member-only route of ``server`` as ``client`` sees it."""
    if with_cert:
        context = tls.client_context(client.credentials, server.credentials.cert_der)
    else:
        context = peer_client.pinned_anonymous_context(server.credentials.cert_der)
    url = f"https://127.0.0.1:{server.port}/v1/cluster/roster"
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        session.get(url) as response,
    ):
        return response.status


async def test_the_right_pin_pairs_both_sides_durably(
    pair_of_nodes: tuple[Node, Node, FakeClock], tmp_path: Path
) -> None:
    a, b, _ = pair_of_nodes
    invite_id, pin = await _invite(a, b)
    assert len(pin) == 6 and pin.isdigit()
    received = [e.invite for e in b.invites()]
    assert [(i.id, i.direction, i.peer_name) for i in received] == [(invite_id, "incoming", "desk")]
    assert received[0].peer_fingerprint == a.credentials.fingerprint

    paired = await b.service.accept(received[0].id, pin)

    assert paired.state == "paired", paired.reason
    assert a.invites()[-1].invite.state == "paired"
    a_sees, b_sees = a.service.membership, b.service.membership
    assert a_sees.cluster_id is not None and a_sees.cluster_id == b_sees.cluster_id
    assert a_sees.members[b.node_id].cert_der == b.credentials.cert_der
    assert not a_sees.members[b.node_id].provisional, "the hello made the pin final"
    assert b_sees.members[a.node_id].cert_der == a.credentials.cert_der
    reloaded = await MemberStore(a.store).load()
    assert reloaded.members[b.node_id].cert_der == b.credentials.cert_der
    # Member routes: a pinned client passes the gate (405: the roster is POSTed), others get 403.
    assert await _members_route(b, a, with_cert=True) == 405
    assert await _members_route(b, a, with_cert=False) == 403


async def test_a_wrong_pin_ends_the_invite_on_both_sides(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, _ = pair_of_nodes
    invite_id, pin = await _invite(a, b)
    wrong = f"{(int(pin) + 1) % 1_000_000:06d}"
    ended = await b.service.accept(invite_id, wrong)  # type: ignore[arg-type]
    assert ended.state == "wrong-pin"
    assert a.invites()[-1].invite.state == "wrong-pin"
    assert not a.service.membership.members and not b.service.membership.members
    with pytest.raises(errors.Conflict, match="over"):
        await b.service.accept(invite_id, pin)  # type: ignore[arg-type]
    # The same invite cannot be tried again at A either: a fresh start is told it is over.
    again = await _post_start(a, invite_id)
    assert again.state in ("expired", "wrong-pin")


async def _post_start(a: Node, invite_id: str) -> m.StartAnswer:
    context = peer_client.pinned_anonymous_context(a.credentials.cert_der)
    start = m.Start(invite_id=invite_id, sid=b"s" * 16, share=b"\x09" + b"\x00" * 31, ad=b"{}")
    return await peer_client.post("127.0.0.1", a.port, m.START_PATH, start, context, m.StartAnswer)


async def test_a_malformed_pin_is_refused_before_anything_is_sent(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, _ = pair_of_nodes
    invite_id, _ = await _invite(a, b)
    for bad in ("12345", "1234567", "12a456", " 123456", "１２３４５６"):
        with pytest.raises(errors.InvalidParams, match="six digits"):
            await b.service.accept(invite_id, bad)  # type: ignore[arg-type]
    assert a.invites()[-1].invite.state == "pending", "the inviter saw no attempt"


async def test_invites_expire_after_five_minutes_on_both_sides(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, clock = pair_of_nodes
    invite_id, pin = await _invite(a, b)
    clock.now += 301
    await a.service.expire()
    await b.service.expire()
    assert a.invites()[-1].invite.state == "expired"
    assert b.invites()[-1].invite.state == "expired"
    with pytest.raises(errors.Conflict):
        await b.service.accept(invite_id, pin)  # type: ignore[arg-type]


async def test_one_outgoing_invite_at_a_time_and_a_silent_decline(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, _ = pair_of_nodes
    invite_id, _ = await _invite(a, b)
    second = await a.service.invite("127.0.0.1", b.port)
    assert second.invite.state == "busy" and second.pin == ""
    declined = await b.service.decline(invite_id)  # type: ignore[arg-type]
    assert declined.state == "declined"
    # The inviter is never told (that would tell whoever sent it that the user is there).
    assert a.invites()[-1].invite.state == "pending"


async def test_repeated_wrong_pins_lock_the_inviter_out(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, clock = pair_of_nodes
    for _ in range(3):
        invite_id, pin = await _invite(a, b)
        await b.service.accept(invite_id, f"{(int(pin) + 7) % 1_000_000:06d}")  # type: ignore[arg-type]
        clock.now += 10
    locked = await a.service.invite("127.0.0.1", b.port)
    assert locked.invite.state == "locked-out" and "15 minutes" in (locked.invite.reason or "")
    clock.now += 901
    assert (await _invite(a, b))[1]


async def test_a_node_in_another_cluster_rejects_the_invite(
    pair_of_nodes: tuple[Node, Node, FakeClock], tmp_path: Path
) -> None:
    a, b, clock = pair_of_nodes
    c = await _start_node(tmp_path, "gpu-box", clock, "cccccccc-0000-4000-8000-000000000003")
    try:
        invite_id, pin = await _invite(c, b)  # b joins c's cluster
        assert (await b.service.accept(invite_id, pin)).state == "paired"  # type: ignore[arg-type]
        b.service.open_join_window(10)
        rejected = await a.service.invite("127.0.0.1", b.port)
        assert rejected.invite.state == "rejected"
        assert "another cluster" in (rejected.invite.reason or "")
    finally:
        await stop_node(c)


class _Relay:
    """A man in the middle between A and B: it terminates TLS with its own certificate, relays
    node-info and the invite to B (putting its own certificate and port in the invite, since B
    would refuse a certificate that differs from the invite's) and the PIN exchange to A."""

    def __init__(self, a: Node, b: Node, *, rewrite_ad: bool, copy_info: bool = False) -> None:
        self.a, self.b = a, b
        self.rewrite_ad = rewrite_ad  # claim its own fingerprint in both sides' CPace data
        self.copy_info = copy_info  # serve B's node-info as is (else naming its certificate)
        self.credentials = mint(NodeId("eeeeeeee-0000-4000-8000-00000000000e"))
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/node-info", self._node_info)
        app.router.add_post(m.INVITE_PATH, self._offer)
        app.router.add_post("/{path:.*}", self._to_a)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        context = tls.server_context(self.credentials, ())
        await web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def _node_info(self, _: web.Request) -> web.Response:
        info = await peer_client.node_info("127.0.0.1", self.b.port)
        if not self.copy_info:
            info = msgspec.structs.replace(info, fingerprint=self.credentials.fingerprint)
        return web.Response(body=msgspec.json.encode(info), content_type="application/json")

    async def _offer(self, request: web.Request) -> web.Response:
        offer = msgspec.json.decode(await request.read(), type=m.InviteOffer)
        forged = msgspec.structs.replace(
            offer, cert_der=self.credentials.cert_der, node_port=self.port
        )
        return await self._send(self.b, m.INVITE_PATH, msgspec.json.encode(forged))

    async def _to_a(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.path == m.START_PATH and self.rewrite_ad:
            start = msgspec.json.decode(body, type=m.Start)
            ad = m.associated_data(self.b.node_id, self.credentials.fingerprint)
            body = msgspec.json.encode(msgspec.structs.replace(start, ad=ad))
        answer = await self._send(self.a, request.path, body)
        if request.path != m.START_PATH or not self.rewrite_ad:
            return answer
        assert isinstance(answer.body, bytes)
        started = msgspec.json.decode(answer.body, type=m.StartAnswer)
        ad = m.associated_data(self.a.node_id, self.credentials.fingerprint)
        forged = msgspec.structs.replace(started, ad=ad)
        return web.Response(status=answer.status, body=msgspec.json.encode(forged))

    async def _send(self, node: Node, path: str, body: bytes) -> web.Response:
        context = peer_client.pinned_anonymous_context(node.credentials.cert_der)
        url = f"https://127.0.0.1:{node.port}{path}"
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(url, data=body, headers={"Content-Type": "application/json"}) as answer,
        ):
            return web.Response(status=answer.status, body=await answer.read())


@pytest.mark.parametrize("rewrite_ad", [False, True])
async def test_a_relay_with_its_own_certificate_cannot_complete_pairing(
    pair_of_nodes: tuple[Node, Node, FakeClock], rewrite_ad: bool
) -> None:
    a, b, _ = pair_of_nodes
    relay = _Relay(a, b, rewrite_ad=rewrite_ad)
    await relay.start()
    b.service.open_join_window(10)
    try:
        created = await a.service.invite("127.0.0.1", relay.port)  # A thinks it reaches B
        assert created.invite.state == "pending" and created.invite.peer_node_id == b.node_id
        received = b.invites()[-1].invite
        ended = await b.service.accept(received.id, created.pin)  # the right PIN, typed on B
    finally:
        assert relay.runner is not None
        await relay.runner.cleanup()
    if rewrite_ad:  # the run goes through: the certificate in the channel identifier differs
        assert ended.state == "wrong-pin"
        assert a.invites()[-1].invite.state == "wrong-pin"
    else:  # A sees that B names another certificate than the one it invited (the relay's)
        assert ended.state == "failed" and "another certificate" in (ended.reason or "")
        assert a.invites()[-1].invite.state == "failed"
    assert not a.service.membership.members and not b.service.membership.members


async def test_a_relay_showing_the_real_node_info_is_refused_before_anything_is_sent(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, b, _ = pair_of_nodes
    relay = _Relay(a, b, rewrite_ad=False, copy_info=True)
    await relay.start()
    b.service.open_join_window(10)
    try:
        probe = await a.service.probe("127.0.0.1", relay.port)
        created = await a.service.invite("127.0.0.1", relay.port)
    finally:
        assert relay.runner is not None
        await relay.runner.cleanup()
    assert not probe.invitable and "another certificate" in (probe.reason or "")
    assert created.invite.state == "failed" and created.pin == ""
    assert "another certificate" in (created.invite.reason or "")
    # What A shows is the certificate TLS presented, never node-info's copied claim.
    assert created.invite.peer_fingerprint == relay.credentials.fingerprint
    assert not b.invites()


async def test_malformed_pairing_messages_get_a_clean_400(
    pair_of_nodes: tuple[Node, Node, FakeClock],
) -> None:
    a, _, _ = pair_of_nodes
    context = peer_client.pinned_anonymous_context(a.credentials.cert_der)
    bodies = [
        b"",
        b"{",
        b"[]",
        b'{"invite_id": 5}',
        b'{"invite_id": "zz", "tag": "AA=="}',
        b"\xff\xfe",
        b'{"invite_id": "' + b"a" * 32 + b'", "tag": "!!"}',
        b"x" * 70_000,
    ]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for path in (m.INVITE_PATH, m.START_PATH, m.CONFIRM_PATH, m.FINISH_PATH, m.HELLO_PATH):
            for body in bodies:
                url = f"https://127.0.0.1:{a.port}{path}"
                async with session.post(url, data=body) as response:
                    assert response.status in (400, 403, 413), (path, body[:20], response.status)
                    assert "error" in await response.json()
        async with session.get(f"https://127.0.0.1:{a.port}/v1/node-info") as response:
            assert response.status == 200, "the node API still serves after the garbage"


async def test_a_pairing_cut_before_the_hello_leaves_both_sides_as_before(
    pair_of_nodes: tuple[Node, Node, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = pair_of_nodes
    invite_id, pin = await _invite(a, b)
    real_post = peer_client.post

    async def cut_at_hello(address: str, port: int, path: str, *args: object) -> object:
        if path == m.HELLO_PATH:
            raise peer_client.PeerUnreachable("the link dropped")
        return await real_post(address, port, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(peer_client, "post", cut_at_hello)
    ended = await b.service.accept(invite_id, pin)  # type: ignore[arg-type]
    assert ended.state == "failed"
    assert not b.service.membership.members and b.service.membership.cluster_id is None
    assert (await MemberStore(b.store).load()).members == {}
    # A committed B's pin provisionally; A restarting (a crash) forgets the unfinished pairing.
    assert a.service.membership.members[b.node_id].provisional
    reopened = Members(MemberStore(a.store))
    restarted = await reopened.open()
    assert restarted.members == {} and restarted.cluster_id is None
    assert (await MemberStore(a.store).load()).members == {}
