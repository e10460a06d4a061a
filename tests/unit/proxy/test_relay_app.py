"""The relay listener in-process over real TLS: who gets in, who is refused, and when.

Node B's relay app serves its Ollama emulator; node A is the pinned peer. Real sockets and real
TLS 1.3 handshakes, no subprocesses.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from unittest import mock

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.identity.certificate import mint
from backend.components.proxy.component import identity_payload
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyIdentity, ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.app import build_relay_app
from backend.workers.proxy.relay.peer_tls import NoIdentity, PeerTls, credentials_from
from backend.workers.proxy.relay.serving import REFUSED_HEADER, RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

QUICK = TimingModel(load_delay=0.01, token_delay=0.002)
NODE_A = mint(NodeId("node-a"))
NODE_B = mint(NodeId("node-b"))
STRANGER = mint(NodeId("stranger"))


@dataclass
class Relay:
    """Node B: its relay's URL, its trust, its door context and its engine."""

    url: str
    peer_tls: PeerTls
    context: DoorContext
    local: RouteTarget
    jobs: list[dict[str, object]]

    def trust(self, *ders: bytes) -> None:
        targets = _table(self.local, ders)
        self.peer_tls.follow(targets)
        self.context.router.update(targets)


def _table(local: RouteTarget, trusted: tuple[bytes, ...]) -> ProxyTargets:
    return ProxyTargets(node_id="node-b", engines={"ollama": [local]}, trusted=list(trusted))


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    engine = EmulatorServer(build_ollama_app(OllamaConfig(models=("llama3.2",), timing=QUICK)))
    await engine.start()
    peer_tls = PeerTls()
    peer_tls.adopt_identity(credentials_from(identity_payload(NODE_B)))
    jobs: list[dict[str, object]] = []

    def sent(events: list[JobEvent]) -> None:
        jobs.extend(msgspec.to_builtins(event) for event in events)

    async with aiohttp.ClientSession() as session:
        router = make_router(session, JobLog(sent), clock=FakeClock(), peer_tls=peer_tls)
        local = RouteTarget(
            node_id="node-b", kind="local", base_url=engine.url, models=["llama3.2:latest"]
        )
        context = DoorContext("ollama", router, RelayBoard())
        served = Relay("", peer_tls, context, local, jobs)
        served.trust(NODE_A.cert_der)
        runner = web.AppRunner(
            build_relay_app({"ollama": context}, context.board, peer_tls),
            handler_cancellation=True,
        )
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock, ssl_context=peer_tls.server_context())
        await site.start()
        served.url = f"https://127.0.0.1:{sock.getsockname()[1]}"
        try:
            yield served
        finally:
            await runner.cleanup()
            await engine.stop()


def _client_of(credentials: NodeCredentials) -> ssl.SSLContext:
    return tls.client_context(credentials, NODE_B.cert_der)


async def _get(url: str, context: ssl.SSLContext) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, ssl=context) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_a_pinned_peer_is_served_by_this_nodes_engine(relay: Relay) -> None:
    status, _, body = await _get(f"{relay.url}/_pair/relay/ollama/api/tags", _client_of(NODE_A))
    assert status == 200 and b"llama3.2" in body
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{relay.url}/_pair/relay/ollama/api/chat",
            json={"model": "llama3.2", "messages": [], "stream": False},
            headers={"X-PAIR-Job": "node-a/r1/1", "X-PAIR-Attempt": "2", "X-PAIR-Origin": "node-a"},
            ssl=_client_of(NODE_A),
        ) as response,
    ):
        assert response.status == 200
        assert (await response.json())["done"] is True
    kept = [event for event in relay.jobs if event["kind"] == "completed"]
    assert [(e["key"], e["origin"]) for e in kept] == [("node-a/r1/1@2", "node-a")]


async def test_a_client_without_a_certificate_fails_the_handshake(relay: Relay) -> None:
    bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    bare.check_hostname = False
    bare.verify_mode = ssl.CERT_NONE
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(f"{relay.url}/_pair/relay/ollama/api/tags", bare)


async def test_a_certificate_nobody_pinned_is_refused(relay: Relay) -> None:
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(f"{relay.url}/_pair/relay/ollama/api/tags", _client_of(STRANGER))


async def test_a_member_removed_after_the_handshake_is_refused_on_its_kept_connection(
    relay: Relay,
) -> None:
    url = f"{relay.url}/_pair/relay/ollama/api/tags"
    connector = aiohttp.TCPConnector(limit=1)
    context = _client_of(NODE_A)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url, ssl=context) as warm:
            assert warm.status == 200
            await warm.read()
        relay.trust()  # node A is removed; its connection stays open
        async with session.get(url, ssl=context) as refused:
            assert refused.status == 403
            assert refused.headers[REFUSED_HEADER] == "not-paired"
            assert "not paired" in (await refused.json())["error"]["message"]
    # A new handshake is refused by TLS itself.
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(url, _client_of(NODE_A))


async def test_a_member_gets_inference_and_lists_only_never_engine_admin(relay: Relay) -> None:
    # A client's key on the member opens that member's doors, not this computer's engine.
    base = f"{relay.url}/_pair/relay/ollama"
    async with aiohttp.ClientSession() as session:
        asked: tuple[tuple[str, str, dict[str, str] | None], ...] = (
            ("DELETE", "/api/delete", {"model": "llama3.2"}),
            ("POST", "/api/pull", {"model": "qwen2.5"}),
            ("POST", "/api/copy", {"source": "llama3.2", "destination": "x"}),
            ("GET", "/api/version", None),
        )
        for method, path, payload in asked:
            async with session.request(
                method, base + path, json=payload, ssl=_client_of(NODE_A)
            ) as response:
                assert response.status == 403, path
                assert "inference and model lists" in (await response.json())["error"]
    status, _, body = await _get(f"{base}/api/tags", _client_of(NODE_A))
    assert status == 200 and b"llama3.2" in body, "the model is still there"


async def test_a_doors_other_paths_never_go_to_a_member(relay: Relay) -> None:
    member = RouteTarget(
        node_id="node-b",
        kind="peer",
        base_url=relay.url,
        models=["llama3.2:latest"],
        cert_der=NODE_B.cert_der,
    )
    router = make_router(mock.Mock(), clock=FakeClock())
    router.update(ProxyTargets(node_id="node-a", engines={"ollama": [member]}))
    client = TestClient(TestServer(build_app(DoorContext("ollama", router, RelayBoard()))))
    await client.start_server()
    try:
        deleted = await client.delete("/api/delete", json={"model": "llama3.2"})
        assert deleted.status == 503
        assert "does not run on this computer" in (await deleted.json())["error"]
    finally:
        await client.close()
    status, _, body = await _get(f"{relay.url}/_pair/relay/ollama/api/tags", _client_of(NODE_A))
    assert status == 200 and b"llama3.2" in body


async def test_the_relay_serves_only_its_own_paths(relay: Relay) -> None:
    status, _, _ = await _get(f"{relay.url}/api/tags", _client_of(NODE_A))
    assert status == 404
    status, _, _ = await _get(f"{relay.url}/_pair/relay/vllm/api/tags", _client_of(NODE_A))
    assert status == 404


async def test_front_doors_no_longer_serve_the_relay_paths(relay: Relay) -> None:
    client = TestClient(TestServer(build_app(relay.context)))
    await client.start_server()
    try:
        for path in (
            "/_pair/relay/ollama/api/tags",
            "/_pair/relay/api/tags",
            "/_pair/relay-started",
        ):
            response = await client.get(path)
            assert response.status == 404, path
            assert "relay port" in str((await response.json())["error"])
    finally:
        await client.close()


def test_client_contexts_are_one_per_peer_certificate_and_dropped_with_the_peer() -> None:
    peer_tls = PeerTls()
    peer = RouteTarget(node_id="b", kind="peer", base_url="https://b:1", cert_der=NODE_B.cert_der)
    engine = RouteTarget(node_id="e", kind="engine", base_url="http://e:1")
    with pytest.raises(NoIdentity):
        peer_tls.client_tls(peer)
    assert peer_tls.client_tls(engine) is True
    peer_tls.adopt_identity(credentials_from(identity_payload(NODE_A)))
    first = peer_tls.client_tls(peer)
    assert isinstance(first, ssl.SSLContext) and peer_tls.client_tls(peer) is first
    peer_tls.follow(ProxyTargets(engines={"ollama": [peer]}))
    assert peer_tls.client_tls(peer) is first  # still listed: its pool is kept
    peer_tls.follow(ProxyTargets(engines={"ollama": [engine]}))
    assert peer_tls.client_tls(peer) is not first


def test_the_identity_payload_round_trips_and_never_prints_its_key() -> None:
    payload = identity_payload(NODE_A)
    assert "PRIVATE KEY" in payload.key_pem and "ENCRYPTED" not in payload.key_pem
    assert "PRIVATE KEY" not in repr(payload)
    credentials = credentials_from(payload)
    assert (credentials.cert_der, credentials.fingerprint) == (NODE_A.cert_der, NODE_A.fingerprint)
    foreign_key = ProxyIdentity(cert_pem=payload.cert_pem, key_pem=identity_payload(NODE_B).key_pem)
    with pytest.raises(ValueError, match="does not belong"):
        credentials_from(foreign_key)
