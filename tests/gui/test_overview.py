"""The Overview page: nodes model, controller (snapshot, numbered events, gaps) and card view."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.controllers.nodes import NodesController
from app.models.nodes import HISTORY_LENGTH, NodeCard, NodeRole, NodesModel
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.gpu_lines import format_used
from app.window.node_card import NodeCardWidget, subtitle
from app.window.overview_page import OverviewPage, column_count
from app.window.sparkline import segments
from backend.protocol import methods
from backend.protocol.types.engines import EngineStatus
from backend.protocol.types.nodes import DiscoveredNode, NodeInfo
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until

GIB = 1024**3


def telemetry(cpu: float = 10.0, **extra: Any) -> dict[str, Any]:
    return {"valid": True, "cpu_percent": cpu, "memory_used_bytes": 8 * GIB,
            "memory_total_bytes": 32 * GIB, **extra}  # fmt: skip


def node(
    node_id: str, name: str, *, sources: tuple[str, ...] = ("mdns",), **extra: Any
) -> dict[str, Any]:
    return {"node_id": node_id, "name": name, "kind": "pair", "sources": list(sources),
            "addresses": ["192.168.1.9"], "ports": {"node": 14320}, "engines": {},
            "reachable": True, "last_seen": 100.0, "version": "0.4.0",
            "telemetry": telemetry(), **extra}  # fmt: skip


def engine_node(node_id: str, name: str) -> dict[str, Any]:
    return {"node_id": node_id, "name": name, "kind": "engine", "sources": ["manual"],
            "addresses": ["192.168.1.50"], "ports": {"ollama": 11434}, "reachable": True,
            "engines": {"ollama": {"models": ["phi3:mini"], "loaded": ["phi3:mini"]}}}  # fmt: skip


def event(seq: int, name: str, node_id: str, **extra: Any) -> dict[str, Any]:
    return {"seq": seq, "event": name, "node_id": node_id, **extra}


def snapshot(seq: int, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "nodes": list(nodes)}


def node_info(node_id: str = "me", gpus: int = 2) -> dict[str, Any]:
    return {"node_id": node_id, "name": "atlas", "version": "0.4.0",
            "os": {"system": "Linux", "release": "6.8.0", "machine": "x86_64"},
            "cpu": {"name": "Ryzen 9", "cores": 32, "utilization_percent": 12.0},
            "memory": {"total_bytes": 64 * GIB, "used_bytes": 16 * GIB},
            "gpus": [{"vendor": "nvidia", "name": f"RTX {index}", "vram_total_bytes": 24 * GIB,
                      "vram_used_bytes": 6 * GIB, "utilization_percent": 40.0 + index}
                     for index in range(gpus)],
            "telemetry_valid": True,
            "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
            "engines": {}}  # fmt: skip


def engine_status(engine: str, name: str, state: str, installed: bool = True) -> dict[str, Any]:
    return {"engine": engine, "display_name": name, "front_door": "ollama", "mode": "process",
            "installed": installed, "state": state, "port": 11434,
            "default_port": 11434}  # fmt: skip


def wire(raw: dict[str, Any]) -> DiscoveredNode:
    return msgspec.convert(raw, DiscoveredNode)


def start(connection: FakeConnection, seq: int, *nodes: dict[str, Any]) -> None:
    """Script the discovery snapshot and start a session."""
    connection.script(methods.DISCOVERY_SUBSCRIBE, snapshot(seq, *nodes))
    connection.become_ready()


def push(connection: FakeConnection, seq: int, name: str, node_id: str, **extra: Any) -> None:
    connection.push(methods.DISCOVERY_EVENT, event(seq, name, node_id, **extra))


def subscribe_calls(connection: FakeConnection) -> int:
    return [method for method, _ in connection.calls].count(methods.DISCOVERY_SUBSCRIBE.name)


@pytest.fixture
async def controller(connection: FakeConnection) -> AsyncIterator[NodesController]:
    discovery, engines = DiscoveryStore(connection), EnginesStore(connection)
    nodes = NodesController(connection, NodesModel(), discovery, engines)
    yield nodes
    for closing in (nodes, discovery, engines):
        await closing.close()


def names(model: NodesModel) -> list[str]:
    return [card.name for card in model.cards()]


# The model ------------------------------------------------------------------------------------


def test_model_contract_holds_through_every_kind_of_change(qtmodeltester: ModelTester) -> None:
    model = NodesModel()
    qtmodeltester.check(model, force_py=True)
    model.load([wire(node("b", "beta")), wire(node("me", "zeta", sources=("self",)))])
    model.upsert(wire(node("a", "alpha")))
    model.upsert(wire(node("b", "omega")))  # renamed: moves to the end
    model.apply_telemetry("a", wire(node("a", "alpha")).telemetry, 102.0)
    model.remove("a")
    model.load([wire(node("c", "gamma")), wire(node("me", "zeta", sources=("self",)))])
    model.clear()
    model.upsert(wire(engine_node("m1", "nas")))
    qtmodeltester.check(model, force_py=True)


def test_this_node_comes_first_then_the_others_by_name(qtbot: QtBot) -> None:
    model = NodesModel()
    model.load([wire(node("b", "beta")), wire(node("me", "zeta", sources=("self",))),
                wire(node("a", "Alpha"))])  # fmt: skip
    assert names(model) == ["zeta", "Alpha", "beta"]
    with qtbot.waitSignal(model.rowsMoved), qtbot.assertNotEmitted(model.modelReset):
        model.upsert(wire(node("a", "gamma")))
    assert names(model) == ["zeta", "beta", "gamma"]
    assert model.data(model.index(0, 0), NodeRole.IS_SELF) is True
    assert model.data(model.index(0, 0)) == "zeta"


def test_history_is_bounded_and_takes_only_new_valid_readings() -> None:
    model = NodesModel()
    model.upsert(wire(node("a", "alpha")))
    reading = wire(node("a", "alpha")).telemetry
    for second in range(HISTORY_LENGTH + 20):
        model.apply_telemetry("a", reading, 101.0 + second)
    history = model.history("a")
    assert len(history) == HISTORY_LENGTH
    assert history[-1].at == 100.0 + HISTORY_LENGTH + 20
    assert history[-1].memory_percent == pytest.approx(25.0)
    model.apply_telemetry("a", reading, history[-1].at)  # the same reading again
    assert len(model.history("a")) == HISTORY_LENGTH
    assert model.data(model.index(0, 0), NodeRole.HISTORY) == model.history("a")


def test_this_nodes_details_fill_its_card_only() -> None:
    model = NodesModel()
    model.load([wire(node("me", "atlas", sources=("self",))), wire(node("b", "beta"))])
    model.set_self_info(msgspec.convert(node_info(), NodeInfo))
    statuses = [
        engine_status("ollama", "Ollama", "running"),
        engine_status("llamacpp", "llama.cpp", "not-installed", installed=False),
    ]
    model.set_self_engines([msgspec.convert(status, EngineStatus) for status in statuses])
    me, beta = model.cards()
    assert me.os == "Linux 6.8.0 · x86_64"
    assert [gpu.name for gpu in me.gpus] == ["RTX 0", "RTX 1"]
    assert [(e.name, e.state) for e in me.engines] == [("Ollama", "running")]
    assert beta.os is None and beta.gpus == ()


# The controller -------------------------------------------------------------------------------


async def test_snapshot_then_pushes_update_rows_without_reset(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    model = controller.model
    start(connection, 5, node("me", "atlas", sources=("self",)), node("b", "beta"))
    await wait_until(lambda: model.rowCount() == 2)
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.dataChanged) as sig:
        push(connection, 6, "node_updated", "b", node=node("b", "beta", reachable=False))
    assert sig.args[0].row() == 1
    assert model.cards()[1].reachable is False
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsInserted):
        push(connection, 7, "node_joined", "c", node=node("c", "alpha"))
    assert names(model) == ["atlas", "alpha", "beta"]
    with qtbot.assertNotEmitted(model.dataChanged):
        push(connection, 7, "node_left", "c")  # seq 7 was applied already


async def test_telemetry_pushes_extend_the_history(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    model = controller.model
    start(connection, 1, node("b", "beta"))
    await wait_until(lambda: model.rowCount() == 1)
    assert len(model.history("b")) == 1
    for seq in range(2, 6):
        with qtbot.waitSignal(model.dataChanged):
            reading = telemetry(cpu=seq * 10.0)
            push(connection, seq, "node_telemetry", "b", telemetry=reading, last_seen=100.0 + seq)
    assert [sample.cpu_percent for sample in model.history("b")] == [10, 20, 30, 40, 50]
    assert model.cards()[0].cpu_percent == 50
    assert model.cards()[0].last_seen == 105.0


async def test_node_left_removes_its_card(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    model = controller.model
    start(connection, 3, node("a", "alpha"), node("b", "beta"))
    await wait_until(lambda: model.rowCount() == 2)
    with qtbot.waitSignal(model.rowsRemoved), qtbot.assertNotEmitted(model.modelReset):
        push(connection, 4, "node_left", "a")
    assert names(model) == ["beta"]
    assert model.history("a") == ()


async def test_a_gap_subscribes_again_and_keeps_history(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    model = controller.model
    connection.script(
        methods.DISCOVERY_SUBSCRIBE,
        snapshot(1, node("a", "alpha"), node("b", "beta")),
        snapshot(9, node("a", "alpha", last_seen=120.0), node("c", "gamma")),
    )
    connection.become_ready()
    await wait_until(lambda: model.rowCount() == 2)
    with qtbot.assertNotEmitted(model.modelReset):
        push(connection, 4, "node_left", "b")  # 2 and 3 were missed
        await wait_until(lambda: names(model) == ["alpha", "gamma"])
    assert subscribe_calls(connection) == 2
    assert [sample.at for sample in model.history("a")] == [100.0, 120.0]
    push(connection, 10, "node_left", "c")
    assert names(model) == ["alpha"]


async def test_events_that_overtake_the_snapshot_apply_after_it(
    connection: FakeConnection, controller: NodesController
) -> None:
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.DISCOVERY_SUBSCRIBE, answer)
    connection.become_ready()
    await settle()
    push(connection, 4, "node_joined", "a", node=node("a", "old"))
    push(connection, 5, "node_updated", "a", node=node("a", "new"))
    answer.set_result(snapshot(4, node("a", "old")))
    await wait_until(lambda: controller.model.rowCount() == 1)
    assert names(controller.model) == ["new"]


async def test_this_nodes_telemetry_rereads_its_gpus_and_engines_follow_pushes(
    connection: FakeConnection, controller: NodesController
) -> None:
    model = controller.model
    events = EngineEvents(connection, seq=7)
    events.script(
        engine_status("ollama", "Ollama", "stopped"),
        engine_status("lmstudio", "LM Studio", "stopped"),
    )
    connection.script(methods.NODEINFO_GET, node_info(gpus=1), node_info(gpus=2))
    start(connection, 1, node("me", "atlas", sources=("self",)))
    await wait_until(lambda: len(model.cards()[0].gpus) == 1 if model.cards() else False)
    await wait_until(lambda: len(model.cards()[0].engines) == 2)
    push(connection, 2, "node_telemetry", "me", telemetry=telemetry(), last_seen=102.0)
    await wait_until(lambda: len(model.cards()[0].gpus) == 2)
    assert [m for m, _ in connection.calls].count(methods.NODEINFO_GET.name) == 2
    events.state(engine_status("ollama", "Ollama", "running"))
    assert [(e.name, e.state) for e in model.cards()[0].engines] == [
        ("LM Studio", "stopped"), ("Ollama", "running")]  # fmt: skip


async def test_an_engine_event_that_overtakes_the_engines_snapshot_applies_after_it(
    connection: FakeConnection, controller: NodesController
) -> None:
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    events = EngineEvents(connection, seq=4)
    connection.script(methods.ENGINE_SUBSCRIBE, answer)
    connection.script(methods.NODEINFO_GET, node_info())
    start(connection, 1, node("me", "atlas", sources=("self",)))
    await wait_until(lambda: controller.model.rowCount() == 1)
    events.state(engine_status("ollama", "Ollama", "running"))  # seq 5
    answer.set_result(
        {**events.snapshot([engine_status("ollama", "Ollama", "starting")]), "seq": 4}
    )
    await wait_until(lambda: bool(controller.model.cards()[0].engines))
    engines = controller.model.cards()[0].engines
    assert [(e.name, e.state) for e in engines] == [("Ollama", "running")]


async def test_session_end_clears_the_nodes(
    connection: FakeConnection, controller: NodesController
) -> None:
    start(connection, 1, node("a", "alpha"))
    await wait_until(lambda: controller.model.rowCount() == 1)
    connection.lose_session()
    assert controller.model.rowCount() == 0
    push(connection, 2, "node_left", "a")  # held until a snapshot


# The page -------------------------------------------------------------------------------------


async def test_the_page_shows_cards_and_the_disconnected_state(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    page = OverviewPage(connection, controller.model)
    qtbot.addWidget(page)
    assert page.empty_state.headline.text() == "Connecting to the PAIR service…"
    me = node("me", "atlas", sources=("self",))
    start(connection, 1, node("b", "beta"), me, engine_node("m1", "nas"))
    await wait_until(lambda: len(page.cards()) == 3)
    assert page.stack.currentWidget() is page.grid
    assert [card.name.text() for card in page.cards()] == ["atlas", "beta", "nas"]
    assert page.summary.text() == "3 computers · 3 online"
    nas = page.card("m1")
    assert nas is not None
    assert nas.metrics.isHidden() and not nas.engine_rows[0].isHidden()
    assert nas.engine_rows[0].models.text() == "Loaded: phi3:mini"
    connection.lose_session()
    assert page.cards() == []
    assert page.stack.currentWidget() is page.empty_state
    assert page.empty_state.headline.text() == "Not connected to the PAIR service"


async def test_a_push_refreshes_only_its_own_card(
    qtbot: QtBot,
    connection: FakeConnection,
    controller: NodesController,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = OverviewPage(connection, controller.model)
    qtbot.addWidget(page)
    start(connection, 1, node("a", "alpha"), node("b", "beta"))
    await wait_until(lambda: len(page.cards()) == 2)
    before = page.cards()
    shown: list[str] = []
    original = NodeCardWidget.show_node

    def spy(self: NodeCardWidget, card: NodeCard, history: Any) -> None:
        shown.append(card.node_id)
        original(self, card, history)

    monkeypatch.setattr(NodeCardWidget, "show_node", spy)
    push(connection, 2, "node_telemetry", "b", telemetry=telemetry(cpu=77.0), last_seen=102.0)
    assert shown == ["b"]
    assert page.cards() == before  # the same widgets, none rebuilt
    beta = page.card("b")
    assert beta is not None
    assert beta.tiles["cpu"].value.text() == "77 %"
    assert len(beta.tiles["cpu"].sparkline.points) == 2
    push(connection, 3, "node_joined", "c", node=node("c", "aardvark"))
    assert shown == ["b", "c"]
    assert page.cards()[1:] == before


async def test_an_offline_node_reads_offline_and_keeps_its_chart(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    page = OverviewPage(connection, controller.model)
    qtbot.addWidget(page)
    engines = {"ollama": {"loaded": ["gemma2:9b"]}}
    start(connection, 1, node("b", "beta", reachable=False, engines=engines))
    await wait_until(lambda: len(page.cards()) == 1)
    card = page.cards()[0]
    assert "Offline" in card.status.text()
    assert "last seen" in card.service.text()
    assert card.tiles["cpu"].value.text() == "—"
    assert len(card.tiles["cpu"].sparkline.points) == 1
    assert card.engine_rows[0].state.text() == "offline"


async def test_cards_reflow_into_columns_that_fit(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    page = OverviewPage(connection, controller.model)
    qtbot.addWidget(page)
    start(connection, 1, node("a", "a"), node("b", "b"), node("c", "c"))
    await wait_until(lambda: len(page.cards()) == 3)
    page.resize(1100, 600)
    page.show()
    await wait_until(lambda: page.grid.columns == 3)
    page.resize(560, 600)
    await wait_until(lambda: page.grid.columns == 1)


def overlapping_rows(card: NodeCardWidget) -> list[str]:
    """The engine rows of ``card`` that run into the row below or past the card's bottom."""
    rows = [row for row in card.engine_rows if row.isVisible()]
    bottoms = [row.mapTo(card, row.rect().bottomLeft()).y() for row in rows]
    tops = [row.mapTo(card, row.rect().topLeft()).y() for row in rows[1:]] + [card.height()]
    clipped = [row.height() < row.minimumSizeHint().height() for row in rows]
    return [
        row.name.text()
        for row, bottom, top, squeezed in zip(rows, bottoms, tops, clipped, strict=True)
        if bottom >= top or squeezed
    ]


async def test_every_card_is_as_tall_as_its_engine_rows(
    qtbot: QtBot, connection: FakeConnection, controller: NodesController
) -> None:
    page = OverviewPage(connection, controller.model)
    qtbot.addWidget(page)
    one = {"ollama": {"loaded": ["llama3.2:3b"]}}
    two = {"llamacpp": {"loaded": ["tiny-random-llama"]}, "ollama": {"loaded": ["qwen2.5:7b"]}}
    start(connection, 1, node("me", "gaming-pc", sources=("self",), engines=one),
          node("g", "gpu-box", engines=one), node("l", "laptop", engines=two))  # fmt: skip
    await wait_until(lambda: len(page.cards()) == 3)
    page.resize(930, 720)  # the page of a 1100 px window beside the sidebar
    page.show()
    await wait_until(lambda: page.grid.columns == 2)
    # A second engine starts on a card that is already laid out.
    push(connection, 2, "node_updated", "g", node=node("g", "gpu-box", engines=two))
    await settle()
    await asyncio.sleep(0.2)  # layout requests are posted events: let them all run
    gpu_box = page.card("g")
    assert gpu_box is not None and len(gpu_box.engine_rows) == 2
    for card in page.cards():
        assert card.height() >= card.minimumSizeHint().height(), card.name.text()
        assert overlapping_rows(card) == [], card.name.text()


# Pure helpers ---------------------------------------------------------------------------------


def test_column_count_fits_cards_of_the_minimum_width() -> None:
    assert column_count(100) == 1
    assert column_count(652, minimum=320, spacing=12) == 2
    assert column_count(651, minimum=320, spacing=12) == 1


def test_sparkline_segments_break_at_missing_values_and_silences() -> None:
    points = [(0.0, 1.0), (2.0, 2.0), (4.0, None), (6.0, 3.0), (30.0, 4.0), (32.0, 5.0)]
    assert segments(points, gap=10.0) == [[(0.0, 1.0), (2.0, 2.0)], [(6.0, 3.0)],
                                          [(30.0, 4.0), (32.0, 5.0)]]  # fmt: skip


def test_figures_read_naturally() -> None:
    assert format_used(8 * GIB, 32 * GIB) == "8.0 / 32.0\u00a0GB"
    assert format_used(None, 32 * GIB) == "— / 32.0\u00a0GB"
    assert format_used(None, None) == ""
    card = NodeCard(node_id="m1", name="nas", kind="engine", is_self=False, reachable=True,
                    endpoint="192.168.1.50:11434")  # fmt: skip
    assert subtitle(card) == "Engine without PAIR · 192.168.1.50:11434"
