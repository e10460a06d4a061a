"""What node-info tells whom: a stranger (no pinned certificate) reads only what pairing needs
(id, name, version, ports, fingerprint); hardware, the OS release, live load and pending jobs go
to members over their pinned TLS and to this computer; no answer names the server software."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backend.components.cluster import peer_client
from backend.components.nodeinfo.payload import NodeInfoSource
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.protocol.types.nodes import (
    NodeCpu,
    NodeEngineModels,
    NodeGpu,
    NodeMemory,
    NodeOs,
)
from tests.fakes import FakeClock
from tests.unit.cluster import harness
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    C_ID,
    Node,
    anonymous_node_info,
    member_node_info,
    pair,
    start_node,
    stop_node,
)

ENGINES = {"ollama": NodeEngineModels(models=["private-model:7b"], loaded=[])}
OS = NodeOs(system="Linux", release="6.18.44-generic", machine="x86_64")
VIEW = TelemetryView(
    cpu=NodeCpu(name="AMD Ryzen 9 7950X", cores=32, utilization_percent=87.0),
    memory=NodeMemory(total_bytes=64 << 30, used_bytes=40 << 30),
    gpus=[NodeGpu(vendor="nvidia", name="RTX 4090", vram_total_bytes=24 << 30)],
    valid=True,
    age_ms=300,
)


def _another_computer(_: str | None) -> bool:
    return False


def _with_figures(**fields: Any) -> NodeInfoSource:
    """The harness's node-info source, with hardware, live load and pending jobs to hide."""
    return NodeInfoSource(
        **{**fields, "telemetry": lambda: VIEW, "pending_jobs": lambda: 2, "os": OS}
    )


@pytest.fixture
async def nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Node, Node, Node]]:
    """A (another computer to its clients), B paired with A, O (loopback is its owner)."""
    monkeypatch.setattr(harness, "NodeInfoSource", _with_figures)
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(
        tmp_path, "desk", clock, A_ID, engines=ENGINES, this_computer=_another_computer
    )
    b = await start_node(tmp_path, "laptop", clock, B_ID)
    owned = await start_node(tmp_path, "own", clock, C_ID, engines=ENGINES)
    try:
        await pair(a, b)
        yield a, b, owned
    finally:
        for node in (a, b, owned):
            await stop_node(node)


async def test_a_stranger_reads_only_what_pairing_needs(nodes: tuple[Node, Node, Node]) -> None:
    a, _, _ = nodes
    info = await anonymous_node_info(a)
    assert (info.node_id, info.name, info.version) == (A_ID, "desk", "test")
    assert info.ports.node == a.port and info.fingerprint == a.credentials.fingerprint
    assert info.os == NodeOs() and info.cpu == NodeCpu() and info.memory == NodeMemory()
    assert info.gpus == [] and not info.telemetry_valid and info.telemetry_age_ms is None
    assert info.pending_jobs is None and info.engines is None


async def test_a_member_over_its_pinned_tls_and_the_owner_read_everything(
    nodes: tuple[Node, Node, Node],
) -> None:
    a, b, owned = nodes
    for info in (await member_node_info(b, a), await anonymous_node_info(owned)):
        assert info.os == OS and info.cpu == VIEW.cpu and info.memory == VIEW.memory
        assert info.gpus == VIEW.gpus and info.telemetry_valid and info.pending_jobs == 2
        assert info.engines == ENGINES


async def _headers(node: Node, path: str) -> tuple[int, Callable[[str], str | None]]:
    context = peer_client.pinned_anonymous_context(node.credentials.cert_der)
    connector = aiohttp.TCPConnector(ssl=context)
    url = f"https://127.0.0.1:{node.port}{path}"
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as answer:
        await answer.read()
        return answer.status, answer.headers.get


async def test_no_answer_names_the_server_software(nodes: tuple[Node, Node, Node]) -> None:
    a, _, _ = nodes
    for path, status in (("/v1/node-info", 200), ("/nowhere", 404), ("/v1/cluster/roster", 403)):
        answered, header = await _headers(a, path)
        assert answered == status and header("Server") is None, path
