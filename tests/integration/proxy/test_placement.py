"""PAIR's placement on three emulated nodes: a burst fills the fast node's free slots first.

Node A's front door routes to its own engine (slow: one slot) and to two peers over mutual TLS
(fast: four slots; mid: two), each an Ollama emulator with the model's own speed and slots.
One request pinned to each node first lets A measure the speeds; then a burst of long
requests arrives at once. Which node served each request is read from A's job events (the
order of the ``submitted`` events is the order placement chose), never from how fast it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

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
)

FAST, MID = "node-fast", "node-mid"
SLOW = LOCAL_NODE
TOKENS = 100
# tokens/s and slots per node: about 2 s, 3 s and 5 s for one answer. Each speed is measured
# from one answer, in this process's emulators: on a loaded machine a measurement runs slow, so
# the nodes' speeds lie far enough apart for one slow reading not to swap two of them.
SHAPES = {FAST: (50.0, 4), MID: (33.0, 2), SLOW: (20.0, 1)}
BURST = 16


@pytest.fixture
async def emulators() -> AsyncIterator[dict[str, str]]:
    """One Ollama emulator per node, with model ``m`` at that node's speed and slots."""
    servers: dict[str, EmulatorServer] = {}
    for node, (speed, slots) in SHAPES.items():
        timing = TimingModel(models={"m": ModelPace(tokens_per_s=speed, slots=slots, load_s=0.0)})
        servers[node] = EmulatorServer(build_ollama_app(OllamaConfig(models=("m",), timing=timing)))
        await servers[node].start()
    yield {node: server.url for node, server in servers.items()}
    for server in servers.values():
        await server.stop()


def _local(node: str, url: str) -> RouteTarget:
    slots = SHAPES[node][1]
    return RouteTarget(node_id=node, kind="local", base_url=url, models=["m"], slots=slots)


async def _peer(start_proxy: StartProxy, node: str, url: str) -> RouteTarget:
    """Start ``node``'s proxy serving its emulator; the target A's table lists for it."""
    proxy = await start_proxy(node_id=node)
    proxy.targets = ProxyTargets(
        node_id=node,
        engines={"ollama": [_local(node, url)]},
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    peer = proxy.as_peer(node, ["m"])
    # What A's broker reads from the peer's node-info: its slots and resident models.
    return msgspec.structs.replace(peer, slots=SHAPES[node][1], resident=["m"], resident_known=True)


def _placements(proxy: RunningProxy) -> list[str]:
    """The node of every dispatch, in the order placement chose them."""
    return [e["target"] for e in proxy.jobs if e["kind"] == "submitted" and e.get("target")]


async def _table(proxy: RunningProxy, targets: ProxyTargets) -> None:
    proxy.targets = targets
    await proxy.wait_table()


async def test_a_burst_fills_the_fast_nodes_free_slots_first_and_the_slow_node_last(
    start_proxy: StartProxy, emulators: dict[str, str]
) -> None:
    peers = [await _peer(start_proxy, node, emulators[node]) for node in (FAST, MID)]
    a = await start_proxy()
    owners: list[RouteTarget] = [_local(SLOW, emulators[SLOW]), *peers]
    table = ProxyTargets(node_id=LOCAL_NODE, engines={"ollama": owners}, placement="pair")

    # One answer from each node (pinned), so A has measured every node's speed.
    for node in (FAST, MID, SLOW):
        await _table(a, msgspec.structs.replace(table, pins={"ollama": node}))
        assert await generate(a, tokens=TOKENS, timeout=120) == 200
    assert _placements(a) == [FAST, MID, SLOW]
    await _table(a, table)

    statuses = await asyncio.gather(
        *(generate(a, tokens=TOKENS, timeout=120) for _ in range(BURST))
    )

    assert statuses == [200] * BURST
    burst = _placements(a)[3:]
    assert len(burst) == BURST, "every request was placed once: no failover"
    assert burst[:4] == [FAST] * 4, "the fast node's four free slots first"
    first_mid, first_slow = burst.index(MID), burst.index(SLOW)
    assert first_mid < first_slow, "the mid node's free slots before the slow node's"
    assert burst[:first_slow].count(FAST) >= 4, "the slow node only once the fast one is full"
    counts: dict[str, Any] = {node: burst.count(node) for node in SHAPES}
    assert counts[FAST] > counts[MID] > counts[SLOW] >= 1, counts
