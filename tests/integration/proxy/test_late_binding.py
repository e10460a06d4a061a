"""Late binding: requests waiting in this node's queue move to a copy of the model that frees up.

Node A's door routes to its own engine (one slot, about 0.6 s an answer). A burst of requests
arrives while A is the only owner, so all but the first wait in A's queue. Then a peer with the
model appears in A's table (a replica just loaded): the newest waiting requests leave A's queue
for it, the oldest stay, and every request is answered once. Which node served each request is
read from A's job events (each attempt's ``submitted`` target), never from how fast it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from backend.devtools.emulators.generation import ModelPace, TimingModel
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    RunningProxy,
    StartProxy,
    credentials_for,
    generate,
    local,
)

PEER = "node-replica"
TOKENS = 30
BURST = 8


@pytest.fixture
async def emulators() -> AsyncIterator[dict[str, str]]:
    """A's engine and the peer's: model ``m``, one slot, 50 tokens/s (0.6 s an answer)."""
    servers: dict[str, EmulatorServer] = {}
    for node in (LOCAL_NODE, PEER):
        pace = ModelPace(tokens_per_s=50.0, slots=1, load_s=0.0)
        timing = TimingModel(models={"m": pace})
        servers[node] = EmulatorServer(build_ollama_app(OllamaConfig(models=("m",), timing=timing)))
        await servers[node].start()
    yield {node: server.url for node, server in servers.items()}
    for server in servers.values():
        await server.stop()


async def _peer(start_proxy: StartProxy, url: str) -> RouteTarget:
    proxy = await start_proxy(node_id=PEER)
    proxy.targets = ProxyTargets(
        node_id=PEER,
        engines={"ollama": [local(url, ["m"])]},
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    peer = proxy.as_peer(PEER, ["m"])
    return msgspec.structs.replace(peer, slots=1, resident=["m"], resident_known=True)


ENDS = ("completed", "failed", "cancelled")


def _targets(proxy: RunningProxy, key: str) -> list[str]:
    return [e["target"] for e in proxy.events(key) if e["kind"] == "submitted" and e["target"]]


async def test_waiting_requests_move_to_a_copy_that_appears_newest_first(
    start_proxy: StartProxy, emulators: dict[str, str]
) -> None:
    peer = await _peer(start_proxy, emulators[PEER])
    own = local(emulators[LOCAL_NODE], ["m"])
    a = await start_proxy(ollama=own)
    alone = ProxyTargets(node_id=LOCAL_NODE, engines={"ollama": [own]}, placement="pair")
    a.targets = alone
    await a.wait_table()
    # One answer first, so A has measured its own pace.
    assert await generate(a, tokens=TOKENS, timeout=60) == 200
    first = len(a.keys())

    burst = [asyncio.create_task(generate(a, tokens=TOKENS, timeout=60)) for _ in range(BURST)]
    keys = (await a.wait_keys(first + BURST, timeout=30))[first:]
    # Every request of the burst went to A, the only owner; all but one wait there.
    await a.wait_job(lambda e: e["kind"] == "submitted" and e["key"] == keys[-1], timeout=30)
    a.targets = msgspec.structs.replace(alone, engines={"ollama": [own, peer]})
    statuses = await asyncio.gather(*burst)

    assert statuses == [200] * BURST
    # A job's end reaches the broker in the worker's next batch, maybe after its answer.
    for key in keys:
        await a.wait_job(lambda e, key=key: e["key"] == key and e["kind"] in ENDS, timeout=10)
    served = {key: _targets(a, key) for key in keys}
    moved = [key for key in keys if served[key][-1] == PEER]
    assert all(served[key][0] == LOCAL_NODE for key in keys), served
    assert len(moved) >= 2, f"waiting requests moved to the freed copy: {served}"
    assert all(served[key] == [LOCAL_NODE, PEER] for key in moved), served
    # The newest waiters move; the oldest (the one running first of all) stays.
    assert served[keys[0]] == [LOCAL_NODE], served
    stayed = [index for index, key in enumerate(keys) if key not in moved]
    assert max(stayed) < min(keys.index(key) for key in moved), served
    # Each request was answered once: one completion per job, no failure.
    for key in keys:
        ends = [e["kind"] for e in a.events(key) if e["kind"] in ENDS]
        assert ends == ["completed"], (key, a.events(key))
