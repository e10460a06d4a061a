"""Discovery hijack, tried in-process: an impostor at another address serves node-info in a paired
member's name (copied, and with invented models) and an mDNS record points at it. The member's
address, node API port and model lists must not move: only its pinned mutual TLS counts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from backend.common import tls
from backend.common.tasks import TaskSet
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.records import Announcement
from backend.components.identity.certificate import mint
from backend.core.store import Store
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import (
    DiscoveredNode,
    ManualNodeAdd,
    NodeEngineModels,
)
from tests.fakes import FakeClock
from tests.support.ports import free_port
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    Node,
    eventually,
    pair,
    start_node,
    stop_node,
)
from tests.unit.components.discovery_rig import FAST, another_computer, bare_info, discovery_of

B_ENGINES = {"ollama": NodeEngineModels(models=["mistral:7b", "phi3:mini"], loaded=[])}
FAKE_ENGINES = {"ollama": NodeEngineModels(models=["gpt-oss:120b"], loaded=[])}
IMPOSTOR_HOST = "127.0.0.2"


def _second_loopback_usable() -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((IMPOSTOR_HOST, 0))
        except OSError:
            return False
    return True


pytestmark = pytest.mark.skipif(
    not _second_loopback_usable(), reason=f"{IMPOSTOR_HOST} cannot be bound on this system"
)


@dataclass
class Impostor:
    port: int
    served: list[int]  # node-info answers it managed to give


async def _impostor(engines: dict[str, NodeEngineModels] | None) -> tuple[Impostor, web.AppRunner]:
    """A TLS server with its own certificate that answers node-info as B, to anyone."""
    port = free_port()
    served: list[int] = []
    ports = Ports(node=port, ollama=1, openai=2, llamacpp=3)
    info = bare_info(B_ID, "laptop", "test", ports, engines=engines)

    async def node_info(_: web.Request) -> web.Response:
        served.append(1)
        return web.Response(body=msgspec.json.encode(info), content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/node-info", node_info)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = tls.server_context(mint(B_ID), [])
    await web.TCPSite(runner, IMPOSTOR_HOST, port, ssl_context=context).start()
    return Impostor(port, served), runner


@dataclass
class Rig:
    a: Node
    b: Node
    discovery: DiscoveryComponent

    def b_seen(self) -> DiscoveredNode | None:
        return next((n for n in self.discovery.nodes() if n.node_id == B_ID), None)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(tmp_path, "desk", clock, A_ID)
    b = await start_node(
        tmp_path, "laptop", clock, B_ID, engines=B_ENGINES, this_computer=another_computer
    )
    store = Store(tmp_path / "discovery.db")
    await store.open()
    discovery = discovery_of(a, store)
    tasks = TaskSet("test:discovery")
    try:
        await pair(a, b)
        await discovery.add_manual(ManualNodeAdd(address="127.0.0.1", port=b.port))
        tasks.spawn(discovery.run(), name="discovery")
        rig = Rig(a, b, discovery)
        await eventually(lambda: (n := rig.b_seen()) is not None and n.engines == B_ENGINES)
        yield rig
    finally:
        await discovery.stop()
        await tasks.close(timeout=3.0)
        await store.close()
        for node in (a, b):
            await stop_node(node)


def _holds(rig: Rig) -> None:
    node = rig.b_seen()
    assert node is not None
    assert node.addresses[0] == "127.0.0.1" and IMPOSTOR_HOST not in node.addresses
    assert node.ports["node"] == rig.b.port and node.engines == B_ENGINES and node.reachable


@pytest.mark.parametrize("engines", [None, FAKE_ENGINES], ids=["wipe", "inject"])
async def test_a_spoofed_announcement_does_not_move_a_member_nor_touch_its_models(
    rig: Rig, engines: dict[str, NodeEngineModels] | None
) -> None:
    impostor, runner = await _impostor(engines)
    try:
        spoofed = Announcement(B_ID, "", (IMPOSTOR_HOST,), {"node": impostor.port})
        for _ in range(5):  # re-announced, as a spoofer would, while A polls B
            rig.discovery._announced(spoofed, ())
            await asyncio.sleep(FAST.telemetry_interval * 2)
            _holds(rig)
        assert impostor.served == []  # the pinned handshake failed before any HTTP
    finally:
        await runner.cleanup()


async def test_an_impostor_added_by_address_is_not_taken_for_the_member(rig: Rig) -> None:
    impostor, runner = await _impostor(FAKE_ENGINES)
    try:
        await rig.discovery.add_manual(ManualNodeAdd(address=IMPOSTOR_HOST, port=impostor.port))
        await eventually(lambda: len(impostor.served) >= 2)  # asked (anonymously) and refused
        await asyncio.sleep(FAST.telemetry_interval * 3)
        _holds(rig)
    finally:
        await runner.cleanup()
