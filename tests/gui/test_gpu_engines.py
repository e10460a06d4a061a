"""The GPU line under each computer's header on the Engines page: one line per GPU (name,
utilisation, VRAM) from the Overview's nodes model, following its telemetry; none for a
computer without a GPU."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from pytestqt.qtbot import QtBot

from app.controllers.engines import EnginesController
from app.models.engines import EnginesModel
from app.models.nodes import NodesModel
from app.pending import PendingActions
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.engines_page import EnginesPage
from backend.protocol import methods
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.nodes import DiscoveredNode, NodeGpu, NodeTelemetry
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until
from tests.gui.test_engines import (
    MEMBER,
    SELF,
    Ui,
    broker_status,
    close_ui,
    engine,
    header,
    member,
    member_node,
    myself,
)

GIB = 1024**3
RTX = {"vendor": "nvidia", "name": "NVIDIA GeForce RTX 4090", "vram_total_bytes": 24 * GIB,
       "vram_used_bytes": 8 * GIB, "utilization_percent": 37.0}  # fmt: skip
RTX_LINE = "NVIDIA GeForce RTX 4090 · 37 % · VRAM 8.0 / 24.0\u00a0GB"


def with_gpus(raw: dict[str, Any], *gpus: dict[str, Any]) -> DiscoveredNode:
    telemetry = {"valid": True, **({"gpus": list(gpus)} if gpus else {})}
    return msgspec.convert({**raw, "telemetry": telemetry}, DiscoveredNode)


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[tuple[Ui, NodesModel]]:
    connection, store, model = FakeConnection(), PendingActions(), EnginesModel()
    nodes = NodesModel()
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    controller = EnginesController(
        connection, model, store, engines, discovery, SettingsStore(connection), timeout_s=60.0
    )
    page = EnginesPage(connection, model, controller, nodes=nodes)
    qtbot.addWidget(page)
    page.resize(800, 900)
    page.show()
    made = Ui(connection, store, model, controller, page, EngineEvents(connection))
    yield made, nodes
    await close_ui(made)


async def test_each_computers_header_lists_its_gpus_and_follows_their_figures(
    ui: tuple[Ui, NodesModel],
) -> None:
    made, nodes = ui
    nodes.load([with_gpus(myself(), RTX, {"vendor": "amd"}), with_gpus(member_node())])
    made.connection.script(methods.STATUS, broker_status())
    made.events.script(engine("ollama", "running"), members=[member(engine("ollama"))])
    made.connection.script(
        methods.DISCOVERY_SUBSCRIBE, {"seq": 3, "nodes": [myself(), member_node()]}
    )
    made.connection.become_ready()
    await wait_until(lambda: made.page.card(NodeId(MEMBER), EngineName("ollama")) is not None)
    await settle()
    mine, laptop = header(made, "This computer"), header(made, "laptop")
    assert mine.node_id == SELF and laptop.node_id == MEMBER
    assert mine.gpus.text() == f"{RTX_LINE}\nAMD GPU"  # nothing read of the second: its name
    assert mine.gpus.isVisibleTo(made.page)
    assert laptop.gpus.text() == "" and not laptop.gpus.isVisibleTo(made.page)
    busier = msgspec.convert({**RTX, "utilization_percent": 90.0}, NodeGpu)
    nodes.apply_telemetry(NodeId(SELF), NodeTelemetry(valid=True, gpus=[busier]), 200.0)
    assert mine.gpus.text() == "NVIDIA GeForce RTX 4090 · 90 % · VRAM 8.0 / 24.0\u00a0GB"
    nodes.apply_telemetry(NodeId(MEMBER), NodeTelemetry(valid=True, gpus=[busier]), 200.0)
    assert laptop.gpus.isVisibleTo(made.page)


async def test_a_computer_the_nodes_model_does_not_list_gets_no_gpu_line(
    ui: tuple[Ui, NodesModel],
) -> None:
    made, _ = ui
    await made.ready(engine("ollama", "running"), nodes=[myself()])
    mine = header(made, "This computer")
    assert mine.gpus.text() == "" and mine.gpus.isHidden()
