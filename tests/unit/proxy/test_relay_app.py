"""The relay listener in-process over real TLS: who gets in, who is refused, and when.

Node B's relay app serves its Ollama emulator; node A is the pinned peer. Real sockets and real
TLS 1.3 handshakes, no subprocesses.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from unittest import mock

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.components.identity.certificate import mint
from backend.components.proxy.component import identity_payload
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.protocol.proxy import ProxyIdentity, ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.peer_tls import NoIdentity, PeerTls, credentials_from
from backend.workers.proxy.relay.serving import REFUSED_HEADER, RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.relay_rig import NODE_A, NODE_B, Relay, client_of, serving_relay
from tests.unit.proxy.scripted_door import make_router

QUICK = TimingModel(load_delay=0.01, token_delay=0.002)
STRANGER = mint(NodeId("stranger"))


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    async with serving_relay(OllamaConfig(models=("llama3.2",), timing=QUICK)) as served:
        yield served


async def _get(url: str, context: ssl.SSLContext) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, ssl=context) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_a_pinned_peer_is_served_by_this_nodes_engine(relay: Relay) -> None:
    status, _, body = await _get(f"{relay.url}/_pair/relay/ollama/api/tags", client_of(NODE_A))
    assert status == 200 and b"llama3.2" in body
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{relay.url}/_pair/relay/ollama/api/chat",
            json={"model": "llama3.2", "messages": [], "stream": False},
            headers={"X-PAIR-Job": "node-a/r1/1", "X-PAIR-Attempt": "2", "X-PAIR-Origin": "node-a"},
            ssl=client_of(NODE_A),
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
        await _get(f"{relay.url}/_pair/relay/ollama/api/tags", client_of(STRANGER))


async def test_a_member_removed_after_the_handshake_is_refused_on_its_kept_connection(
    relay: Relay,
) -> None:
    url = f"{relay.url}/_pair/relay/ollama/api/tags"
    connector = aiohttp.TCPConnector(limit=1)
    context = client_of(NODE_A)
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
        await _get(url, client_of(NODE_A))


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
                method, base + path, json=payload, ssl=client_of(NODE_A)
            ) as response:
                assert response.status == 403, path
                assert "inference and model lists" in (await response.json())["error"]
    status, _, body = await _get(f"{base}/api/tags", client_of(NODE_A))
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
    status, _, body = await _get(f"{relay.url}/_pair/relay/ollama/api/tags", client_of(NODE_A))
    assert status == 200 and b"llama3.2" in body


async def test_the_relay_serves_only_its_own_paths(relay: Relay) -> None:
    status, _, _ = await _get(f"{relay.url}/api/tags", client_of(NODE_A))
    assert status == 404
    status, _, _ = await _get(f"{relay.url}/_pair/relay/vllm/api/tags", client_of(NODE_A))
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
