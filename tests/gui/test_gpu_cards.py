"""GPU figures on the Overview's node cards: each GPU of this computer and of members, charted
like CPU and memory, and nothing at all (not zero) where a computer has no GPU or a figure
could not be read; the subtitles read alike for this computer and members."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.controllers.nodes import NodesController
from app.models.nodes import NodesModel
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.node_card import NodeCardWidget
from app.window.overview_page import OverviewPage
from backend.protocol import methods
from tests.gui.helpers import FakeConnection, wait_until

GIB = 1024**3
PORTS = {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080}
RTX = {"vendor": "nvidia", "name": "NVIDIA GeForce RTX 4090", "vram_total_bytes": 24 * GIB,
       "vram_used_bytes": 8 * GIB, "utilization_percent": 37.0}  # fmt: skip


def telemetry(gpus: list[dict[str, Any]], gpu: float | None = None) -> dict[str, Any]:
    memory = {"memory_used_bytes": 8 * GIB, "memory_total_bytes": 32 * GIB}
    figures: dict[str, Any] = {"valid": True, "cpu_percent": 10.0, **memory}
    if gpus:  # as discovery reduces node-info: each GPU, the busiest and the VRAM sums
        used = [g["vram_used_bytes"] for g in gpus if "vram_used_bytes" in g]
        total = [g["vram_total_bytes"] for g in gpus if "vram_total_bytes" in g]
        figures.update(gpus=gpus, gpu_percent=gpu)
        figures.update({"vram_used_bytes": sum(used)} if used else {})
        figures.update({"vram_total_bytes": sum(total)} if total else {})
    return figures


def node(
    node_id: str, name: str, gpus: list[dict[str, Any]], gpu: float | None = 37.0, **extra: Any
) -> dict[str, Any]:
    return {"node_id": node_id, "name": name, "kind": "pair", "sources": ["mdns"],
            "addresses": ["192.168.1.9"], "ports": {"node": 14320}, "engines": {},
            "reachable": True, "last_seen": 100.0, "version": "0.4.0", "system": "Linux",
            "cpu_threads": 32, "telemetry": telemetry(gpus, gpu), **extra}  # fmt: skip


def self_info() -> dict[str, Any]:
    return {"node_id": "me", "name": "atlas", "version": "0.4.0",
            "os": {"system": "Linux", "release": "6.18.44-fc-v1252-long-kernel",
                   "machine": "x86_64"},
            "cpu": {"name": "AMD EPYC", "cores": 32}, "memory": {}, "gpus": [],
            "telemetry_valid": True, "ports": PORTS}  # fmt: skip


@pytest.fixture
async def page(
    qtbot: QtBot, connection: FakeConnection
) -> AsyncIterator[tuple[OverviewPage, FakeConnection]]:
    discovery, engines = DiscoveryStore(connection), EnginesStore(connection)
    controller = NodesController(connection, NodesModel(), discovery, engines)
    overview = OverviewPage(connection, controller.model)
    qtbot.addWidget(overview)
    yield overview, connection
    for closing in (controller, discovery, engines):
        await closing.close()


async def shown(overview: OverviewPage, *nodes: dict[str, Any]) -> list[NodeCardWidget]:
    connection = overview._connection
    assert isinstance(connection, FakeConnection)
    connection.script(methods.NODEINFO_GET, self_info())
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": list(nodes)})
    connection.become_ready()
    await wait_until(lambda: len(overview.cards()) == len(nodes))
    return overview.cards()


async def test_a_members_gpu_shows_its_name_vram_and_use_charted_like_cpu(
    page: tuple[OverviewPage, FakeConnection],
) -> None:
    overview, connection = page
    gpu_box, laptop = await shown(
        overview, node("g", "gpu-box", [RTX]), node("l", "laptop", [], telemetry=telemetry([]))
    )
    assert [row.name.text() for row in gpu_box.gpu_rows] == ["NVIDIA GeForce RTX 4090"]
    assert gpu_box.gpu_rows[0].figures.text() == "37 % · VRAM 8.0 / 24.0\u00a0GB"
    assert gpu_box.gpu_rows[0].bar.fraction == pytest.approx(1 / 3)
    assert gpu_box.tiles["gpu"].isVisibleTo(gpu_box) and gpu_box.tiles["vram"].isVisibleTo(gpu_box)
    assert gpu_box.tiles["gpu"].value.text() == "37 %"
    assert gpu_box.tiles["vram"].value.text() == "33 %"
    assert gpu_box.tiles["vram"].caption.text() == "8.0 / 24.0\u00a0GB"
    busier = telemetry([{**RTX, "utilization_percent": 90.0}], 90.0)
    connection.push(methods.DISCOVERY_EVENT, {"seq": 2, "event": "node_telemetry",
                    "node_id": "g", "last_seen": 102.0, "telemetry": busier})  # fmt: skip
    await wait_until(lambda: gpu_box.tiles["gpu"].value.text() == "90 %")
    assert [value for _, value in gpu_box.tiles["gpu"].sparkline.points] == [37.0, 90.0]
    assert [value for _, value in gpu_box.tiles["vram"].sparkline.points] == pytest.approx(
        [100 / 3, 100 / 3]
    )
    # No GPU: no row, no tile, no "0 %" anywhere on the card.
    assert laptop.gpu_rows == [] and laptop.gpu_section.isHidden()
    assert laptop.tiles["gpu"].isHidden() and laptop.tiles["vram"].isHidden()


async def test_several_gpus_get_a_line_each_and_unread_figures_are_left_out(
    page: tuple[OverviewPage, FakeConnection],
) -> None:
    overview, _ = page
    no_load = {"vendor": "amd", "name": "Radeon Pro W7900"}  # sysfs gave no figures
    box, unread = await shown(
        overview, node("g", "a-box", [RTX, no_load]), node("h", "b-box", [no_load], gpu=None)
    )
    assert [row.name.text() for row in box.gpu_rows] == [
        "NVIDIA GeForce RTX 4090",
        "Radeon Pro W7900",
    ]
    assert box.gpu_rows[1].figures.text() == ""
    assert box.gpu_rows[1].bar.isHidden()
    assert box.tiles["gpu"].caption.text() == "Busiest of 2 GPUs"
    assert unread.gpu_rows[0].name.text() == "Radeon Pro W7900"
    assert unread.tiles["gpu"].isHidden() and unread.tiles["vram"].isHidden()


async def test_this_computer_and_members_have_subtitles_of_one_shape(
    page: tuple[OverviewPage, FakeConnection],
) -> None:
    overview, _ = page
    me = node("me", "atlas", [], sources=["self"], telemetry=telemetry([]))
    atlas, box = await shown(overview, me, node("g", "gpu-box", [RTX]))
    await wait_until(lambda: "AMD EPYC" in atlas.subtitle.toolTip())
    for card in (atlas, box):
        assert card.subtitle.text() == "Linux · 32 CPU threads · 32\u00a0GB"
        assert card.service.text() == "PAIR 0.4.0 · 192.168.1.9:14320"
    assert "6.18.44" not in atlas.subtitle.text()  # the kernel lives in the tooltip
