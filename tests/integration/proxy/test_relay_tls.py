"""The relay port of real proxy workers: mutual TLS pinned to the members, nothing else.

Node B serves its relay on its own port; node A is the only computer it trusts. Clients with no
certificate, a certificate nobody pinned, or a pin B dropped after the handshake are refused;
the front doors do not serve the relay paths at all; a restarted worker serves the relay again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.identity.certificate import mint
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from tests.integration.proxy.conftest import LOCAL_NODE, RunningProxy, StartProxy, credentials_for
from tests.integration.proxy.scripted import ScriptedEngine, start_engine

NODE_B = "node-b"


async def _node_b(start_proxy: StartProxy, engine: ScriptedEngine) -> RunningProxy:
    b = await start_proxy(node_id=NODE_B)
    b.targets = ProxyTargets(
        node_id=NODE_B,
        engines={
            "ollama": [RouteTarget(node_id=NODE_B, kind="local", base_url=engine.url, models=["m"])]
        },
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    await b.wait_table()
    return b


def _as(credentials: NodeCredentials | None) -> ssl.SSLContext:
    if credentials is None:
        bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        bare.check_hostname = False
        bare.verify_mode = ssl.CERT_NONE
        return bare
    return tls.client_context(credentials, credentials_for(NODE_B).cert_der)


async def _tags(b: RunningProxy, context: ssl.SSLContext) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{b.relay_url()}/_pair/relay/ollama/api/tags", ssl=context) as response,
    ):
        await response.read()
        return response.status


@pytest.fixture
async def engine() -> AsyncIterator[ScriptedEngine]:
    started = await start_engine(ScriptedEngine("b"))
    yield started
    assert started.server is not None
    await started.server.stop()


async def test_only_a_pinned_member_gets_through_the_relay_port(
    start_proxy: StartProxy, engine: ScriptedEngine
) -> None:
    b = await _node_b(start_proxy, engine)
    assert b.relay_url() != b.url("ollama").replace("http:", "https:")
    assert await _tags(b, _as(credentials_for(LOCAL_NODE))) == 200
    for stranger in (
        None,
        mint(NodeId("stranger")),
    ):  # no certificate; a self-signed one nobody pinned
        with pytest.raises(aiohttp.ClientConnectionError):
            await _tags(b, _as(stranger))
    # Plaintext on the relay port is not HTTP it answers.
    with pytest.raises(aiohttp.ClientError):
        async with (
            aiohttp.ClientSession() as session,
            session.get(b.relay_url().replace("https:", "http:") + "/_pair/relay/ollama/api/tags"),
        ):
            pass


async def test_the_front_door_does_not_serve_the_relay_paths(
    start_proxy: StartProxy, engine: ScriptedEngine
) -> None:
    b = await _node_b(start_proxy, engine)
    async with aiohttp.ClientSession() as session:
        for path in (
            "/_pair/relay/ollama/api/chat",
            "/_pair/relay/api/chat",
            "/_pair/relay-started?job=k&attempt=1",
        ):
            async with session.post(b.url("ollama") + path, json={"model": "m"}) as response:
                assert response.status == 404, path
    assert engine.received == []


async def test_a_peer_that_drops_us_after_the_handshake_is_failed_over(
    start_proxy: StartProxy, engine: ScriptedEngine
) -> None:
    b = await _node_b(start_proxy, engine)
    other = await start_engine(ScriptedEngine("c"))
    a = await start_proxy()
    via_c = RouteTarget(node_id="node-c", kind="engine", base_url=other.url, models=["m"])
    a.targets = ProxyTargets(
        node_id=LOCAL_NODE,
        engines={"ollama": [b.as_peer(NODE_B, ["m"]), via_c]},
        pins={"ollama": NODE_B},
    )
    await a.wait_table()
    try:
        assert await _chat(a, "t1") == "b:t1 "  # A now holds a kept-alive TLS connection to B
        b.targets = ProxyTargets(node_id=NODE_B, engines=b.targets.engines, trusted=[])
        await b.wait_table()
        assert await _chat(a, "t2") == "c:t2 "
        assert engine.received == ["t1"] and other.received == ["t2"]
    finally:
        assert other.server is not None
        await other.server.stop()


async def test_a_restarted_worker_serves_the_relay_again(
    start_proxy: StartProxy, engine: ScriptedEngine
) -> None:
    b = await _node_b(start_proxy, engine)
    port = b.component.relay_port()
    old_pid = await b.wait_serving()
    os.kill(old_pid, signal.SIGKILL)
    async with asyncio.timeout(15):
        while b.component.pid() in (None, old_pid):
            await asyncio.sleep(0.05)
    await b.wait_serving()
    # The socket is the broker's, kept across the restart; the new worker got the identity again.
    assert b.component.relay_port() == port
    assert await _tags(b, _as(credentials_for(LOCAL_NODE))) == 200


async def _chat(proxy: RunningProxy, tag: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.url("ollama") + "/api/chat",
            json={"model": "m", "messages": [], "stream": False, "tag": tag},
            timeout=aiohttp.ClientTimeout(total=20),
        ) as response,
    ):
        assert response.status == 200, await response.text()
        content: str = json.loads(await response.read())["message"]["content"]
        return content
