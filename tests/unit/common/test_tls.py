"""Pinned TLS between nodes: real handshakes on loopback, and in memory where asyncio hides the
session."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from collections.abc import AsyncIterator

import pytest

from backend.common.certificates import NodeCredentials
from backend.common.tls import (
    PinnedServer,
    client_context,
    peer_certificate,
    pinned_peer,
    server_context,
    unverified_client_context,
)
from backend.components.identity.certificate import issue, mint
from backend.protocol.types.base import NodeId

REFUSED = b""  # the first read after a refused TLS 1.3 client certificate: EOF


def _node() -> NodeCredentials:
    return mint(NodeId(str(uuid.uuid4())))


@pytest.fixture(scope="module")
def server() -> NodeCredentials:
    return _node()


@pytest.fixture(scope="module")
def alice() -> NodeCredentials:
    return _node()


@pytest.fixture(scope="module")
def bob() -> NodeCredentials:
    return _node()


@contextlib.asynccontextmanager
async def serving(context: ssl.SSLContext) -> AsyncIterator[tuple[int, list[bytes | None]]]:
    """A loopback TLS server answering ``ok``; yields its port and the client DERs it saw."""
    seen: list[bytes | None] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(peer_certificate(writer.transport))
        writer.write(b"ok\n")
        await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield listener.sockets[0].getsockname()[1], seen
    finally:
        listener.close()
        await listener.wait_closed()


async def exchange(
    port: int, context: ssl.SSLContext, server_hostname: str | None = None
) -> tuple[bytes, bytes | None]:
    """What a client reads until EOF, and the server certificate it saw."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=server_hostname
    )
    try:
        server_der = peer_certificate(writer.transport)
        try:
            data = await reader.read()
        except (ssl.SSLError, ConnectionResetError):
            # The server's refusal arrives as an alert or a reset, depending on timing.
            data = REFUSED
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return data, server_der


async def test_a_pinned_client_is_served_and_seen_with_its_certificate(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        data, server_der = await exchange(port, client_context(alice, server.cert_der))
    assert data == b"ok\n" and server_der == server.cert_der
    assert seen == [alice.cert_der] and pinned_peer(seen[0], {alice.cert_der})


async def test_an_unpinned_client_certificate_is_refused_after_the_clients_handshake(
    server: NodeCredentials, alice: NodeCredentials, bob: NodeCredentials
) -> None:
    # CERT_OPTIONAL still verifies a certificate that is offered. In TLS 1.3 the client has
    # finished its side when the server refuses, so connecting succeeds and the first read
    # ends; the handler never runs.
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        data, server_der = await exchange(port, client_context(bob, server.cert_der))
    assert data == REFUSED and server_der == server.cert_der
    assert seen == []


async def test_a_client_without_a_certificate_reaches_the_server_as_unpinned(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        data, server_der = await exchange(port, unverified_client_context(None))
    assert data == b"ok\n" and server_der == server.cert_der
    assert seen == [None] and not pinned_peer(seen[0], {alice.cert_der})


async def test_an_unverified_client_with_unpinned_credentials_is_refused(
    server: NodeCredentials, alice: NodeCredentials, bob: NodeCredentials
) -> None:
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        refused, _ = await exchange(port, unverified_client_context(bob))
        served, _ = await exchange(port, unverified_client_context(alice))
    assert refused == REFUSED and served == b"ok\n"
    assert seen == [alice.cert_der]


async def test_a_client_pinning_another_server_fails_in_the_handshake(
    server: NodeCredentials, alice: NodeCredentials, bob: NodeCredentials
) -> None:
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        with pytest.raises(ssl.SSLCertVerificationError, match="self-signed certificate"):
            await exchange(port, client_context(alice, bob.cert_der))
    assert seen == []


async def test_a_reissued_server_certificate_with_the_same_key_does_not_match_the_old_pin(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    node = NodeId(str(uuid.uuid4()))
    old = issue(node, server.private_key)
    new = issue(node, server.private_key)
    assert not pinned_peer(new.cert_der, {old.cert_der})
    async with serving(server_context(new, [alice.cert_der])) as (port, seen):
        with pytest.raises(ssl.SSLCertVerificationError):
            await exchange(port, client_context(alice, old.cert_der))
        data, _ = await exchange(port, client_context(alice, new.cert_der))
    assert data == b"ok\n" and seen == [alice.cert_der]


async def test_a_reissued_client_certificate_with_the_same_key_is_refused(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    reissued = issue(NodeId(str(uuid.uuid4())), alice.private_key)
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        data, _ = await exchange(port, client_context(reissued, server.cert_der))
    assert data == REFUSED and seen == []


@pytest.mark.parametrize("server_hostname", [None, "peer.node.invalid"], ids=["no-sni", "sni"])
async def test_pinned_server_applies_a_new_pin_set_to_the_next_handshake(
    server: NodeCredentials,
    alice: NodeCredentials,
    bob: NodeCredentials,
    server_hostname: str | None,
) -> None:
    pinned = PinnedServer(server, [alice.cert_der])
    to_server = server.cert_der
    async with serving(pinned.context) as (port, seen):
        before = [
            (await exchange(port, client_context(who, to_server), server_hostname))[0]
            for who in (alice, bob)
        ]
        pinned.set_pins([bob.cert_der])
        after = [
            (await exchange(port, client_context(who, to_server), server_hostname))[0]
            for who in (alice, bob)
        ]
    assert before == [b"ok\n", REFUSED] and after == [REFUSED, b"ok\n"]
    assert seen == [alice.cert_der, bob.cert_der]
    assert pinned.pins == {bob.cert_der}
    assert pinned.is_pinned(bob.cert_der) and not pinned.is_pinned(alice.cert_der)


async def test_pinned_server_with_no_pins_serves_only_clients_without_certificates(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    async with serving(PinnedServer(server).context) as (port, seen):
        anonymous, _ = await exchange(port, unverified_client_context(None))
        refused, _ = await exchange(port, client_context(alice, server.cert_der))
    assert anonymous == b"ok\n" and refused == REFUSED and seen == [None]


async def test_contexts_refuse_anything_older_than_tls_1_3(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    old_client = unverified_client_context(None)
    old_client.minimum_version = ssl.TLSVersion.TLSv1_2
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    async with serving(server_context(server, [alice.cert_der])) as (port, seen):
        # The server ends a TLS 1.2 ClientHello with an alert or a reset, depending on timing.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await exchange(port, old_client)
    assert seen == []


def test_every_context_is_tls_1_3_with_strict_x509_checks(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    contexts = [
        server_context(server, [alice.cert_der]),
        client_context(alice, server.cert_der),
        unverified_client_context(alice),
        PinnedServer(server).context,
    ]
    for context in contexts:
        assert context.minimum_version == ssl.TLSVersion.TLSv1_3
        assert context.verify_flags & ssl.VERIFY_X509_STRICT
    assert [context.verify_mode for context in contexts] == [
        ssl.CERT_OPTIONAL,
        ssl.CERT_REQUIRED,
        ssl.CERT_NONE,
        ssl.CERT_OPTIONAL,
    ]
    assert not contexts[1].check_hostname and not contexts[2].check_hostname


# --- session resumption, driven in memory because asyncio cannot offer a saved session


def _handshake(
    client: ssl.SSLContext, server: ssl.SSLContext, session: ssl.SSLSession | None = None
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A TLS handshake over memory BIOs, then one byte so that any tickets reach the client."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, session=session)
    server_side = server.wrap_bio(to_server, to_client, server_side=True)
    pending = [client_side, server_side]
    for _ in range(10):
        for side in list(pending):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
                pending.remove(side)
    assert not pending
    server_side.write(b"x")
    assert client_side.read(1) == b"x"
    return client_side, server_side


def test_server_contexts_issue_no_session_tickets(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    client = client_context(alice, server.cert_der)
    client_side, server_side = _handshake(client, server_context(server, [alice.cert_der]))
    assert server_side.getpeercert(binary_form=True) == alice.cert_der
    assert client_side.session is None or not client_side.session.has_ticket


def test_a_removed_peer_cannot_resume_its_way_past_the_new_pins(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    pinned = PinnedServer(server, [alice.cert_der])
    client = client_context(alice, server.cert_der)
    first, _ = _handshake(client, pinned.context)
    pinned.set_pins([])
    with pytest.raises(ssl.SSLError):
        _handshake(client, pinned.context, session=first.session)


def test_with_tickets_a_removed_peer_would_resume_which_is_why_none_are_issued(
    server: NodeCredentials, alice: NodeCredentials
) -> None:
    # The same swap as PinnedServer's, with OpenSSL's default of two tickets per handshake.
    listener = server_context(server, [])
    listener.num_tickets = 2
    current = {"context": server_context(server, [alice.cert_der])}

    def move(ssl_object: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        ssl_object.context = current["context"]

    listener.sni_callback = move
    client = client_context(alice, server.cert_der)
    first, _ = _handshake(client, listener)
    current["context"] = server_context(server, [])
    resumed, server_side = _handshake(client, listener, session=first.session)
    assert resumed.session_reused and server_side.getpeercert(binary_form=True) == alice.cert_der


def test_client_context_also_trusts_the_announced_next_certificate(
    server: NodeCredentials, alice: NodeCredentials, bob: NodeCredentials
) -> None:
    following = _node()
    client = client_context(alice, server.cert_der, following.cert_der)
    # get_ca_certs() lists only CA certificates; pinned node certificates are not CAs.
    assert client.cert_store_stats()["x509"] == 2
    for presented in (server, following):
        _, server_side = _handshake(client, server_context(presented, [alice.cert_der]))
        assert server_side.getpeercert(binary_form=True) == alice.cert_der
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(client, server_context(bob, [alice.cert_der]))


# --- helpers


def test_peer_certificate_without_tls_is_none() -> None:
    assert peer_certificate(None) is None


async def test_peer_certificate_of_a_plain_transport_is_none() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = listener.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert peer_certificate(writer.transport) is None
        writer.close()
        await writer.wait_closed()
    finally:
        listener.close()
        await listener.wait_closed()


def test_pinned_peer_compares_whole_certificates(alice: NodeCredentials) -> None:
    der = alice.cert_der
    assert pinned_peer(der, [der]) and pinned_peer(bytes(der), frozenset({der}))
    assert not pinned_peer(None, [der])
    assert not pinned_peer(der[:-1], [der]) and not pinned_peer(der + b"\0", [der])
    assert not pinned_peer(der, [])
