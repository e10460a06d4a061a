"""The Models page against a scripted connection: rows, pending actions, pulls and the hub."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QPushButton, QWidget
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.catalog import Catalog, load_catalog
from app.controllers.models import ModelsController, PendingTimeouts
from app.models.hub import CatalogFilter, CatalogModel
from app.models.keyed_table import ROW_ROLE
from app.models.models import (
    DELETING,
    EJECTING,
    LOADING,
    PULLING,
    REMOTE_SIZE_TIP,
    ModelRow,
    ModelsModel,
    ModelsSortProxy,
    expectation_met,
    same_model,
)
from app.models.pulls import PullRow
from app.pending import (
    COLD_LOAD_TIMEOUT_S,
    LMSTUDIO_DELETE_TIMEOUT_S,
    MODEL_ACTION_TIMEOUT_S,
    PendingActions,
    PendingKey,
)
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.models_page import ModelsPage, RowActions
from backend.protocol import methods
from backend.protocol.errors import InternalError
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until

SELF, PEER = "node-self", "node-peer"


def status() -> dict[str, Any]:
    return {
        "version": "0.1.0", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "desk", "control_address": "x", "log_file": None,
        "ports": {"node": 1, "ollama": 2, "openai": 3, "llamacpp": 4},
        "components": [], "errors": [],
    }  # fmt: skip


def engine(name: str, state: str = "running") -> dict[str, Any]:
    return {
        "engine": name, "display_name": name, "front_door": "x", "mode": "process",
        "installed": True, "state": state, "port": 1, "default_port": 1,
    }  # fmt: skip


def listing(by_engine: dict[str, list[str]], loaded: dict[str, list[str]] | None = None) -> Any:
    loaded = loaded or {}
    return {
        "models": sorted({m for names in by_engine.values() for m in names}),
        "by_engine": by_engine,
        "loaded_by_engine": {e: loaded.get(e, []) for e in by_engine},
        "slots_by_engine": {},
    }


def node(node_id: str, name: str, engines: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": ["mdns"],
        "addresses": [], "ports": {}, "engines": engines, "reachable": True, **extra,
    }  # fmt: skip


LOCAL = listing({"ollama": ["llama3.2:3b", "qwen3:8b"], "lmstudio": ["openai/gpt-oss-20b"]})
PEER_NODE = node(PEER, "gpu-box", {"ollama": {"models": ["qwen3:30b"], "loaded": ["qwen3:30b"]}})
SELF_NODE = node(SELF, "desk", {"ollama": {"models": ["stale:1b"]}}, sources=["self"])


@dataclass
class Ui:
    connection: FakeConnection
    pending: PendingActions
    controller: ModelsController
    page: ModelsPage
    events: EngineEvents

    def key(self, engine: str, model: str) -> PendingKey:
        return PendingKey(SELF, engine, model)

    def actions(self, engine: str, model: str) -> RowActions:
        widget = self.page.models_tab.actions_for(self.key(engine, model))
        assert widget is not None
        return widget

    def status_of(self, engine: str, model: str) -> str:
        row = self.controller.models.get(self.key(engine, model))
        assert row is not None
        return self.controller.models.status_text(row)

    def action_calls(self) -> list[dict[str, Any]]:
        return self.connection.called(methods.ENGINE_ACTION)


def script_session(
    ui: Ui,
    local: Any = LOCAL,
    nodes: list[dict[str, Any]] | None = None,
    pulls: tuple[dict[str, Any], ...] = (),
    members: tuple[dict[str, Any], ...] = (),
) -> None:
    connection = ui.connection
    connection.script(methods.STATUS, status())
    ui.events.script(
        engine("ollama"), engine("lmstudio"), models=local, pulls=pulls, members=members
    )
    snapshot_nodes = [SELF_NODE, *(nodes if nodes is not None else [PEER_NODE])]
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": snapshot_nodes})


async def make_ui(qtbot: QtBot, timeouts: PendingTimeouts | None = None, **catalog: Any) -> Ui:
    connection = FakeConnection()
    pending = PendingActions()
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    controller = ModelsController(connection, pending, engines, discovery, timeouts)
    page = ModelsPage(controller, catalog.get("catalog") or load_catalog())
    qtbot.addWidget(page)
    page.show()
    return Ui(connection, pending, controller, page, EngineEvents(connection, seq=20))


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = await make_ui(qtbot)
    yield made
    await close(made)


async def close(ui: Ui) -> None:
    await ui.controller.close()
    await ui.controller.engines.close()
    await ui.controller.discovery.close()
    await ui.connection.stop()


async def start(ui: Ui, **session: Any) -> None:
    script_session(ui, **session)
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()


def never() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


# Pure rules.


def test_ollama_names_without_a_tag_mean_latest() -> None:
    assert same_model("ollama", "llama3.2", "llama3.2:latest")
    assert not same_model("ollama", "llama3.2:1b", "llama3.2:latest")
    assert not same_model("lmstudio", "qwen", "qwen:latest")


def test_expectations_per_pending_action() -> None:
    loaded = ModelRow(PendingKey(SELF, "ollama", "m"), "desk", loaded=True, local=True)
    on_disk = ModelRow(PendingKey(SELF, "ollama", "m"), "desk", loaded=False, local=True)
    assert expectation_met(LOADING, loaded) and not expectation_met(LOADING, on_disk)
    assert expectation_met(EJECTING, on_disk) and not expectation_met(EJECTING, loaded)
    assert expectation_met(DELETING, None) and not expectation_met(DELETING, on_disk)
    assert expectation_met(PULLING, on_disk) and not expectation_met(PULLING, None)


# Models and rows.


@pytest.mark.parametrize("which", ["models", "sorted", "pulls", "catalog", "search"])
async def test_every_model_passes_the_model_tester(
    qtmodeltester: ModelTester, ui: Ui, which: str
) -> None:
    catalog = CatalogModel(load_catalog().entries)
    search = CatalogFilter(catalog)
    target = {
        "models": ui.controller.models,
        "sorted": ModelsSortProxy(ui.controller.models),
        "pulls": ui.controller.pulls,
        "catalog": catalog,
        "search": search,
    }[which]
    qtmodeltester.check(target, force_py=True)
    await start(ui)
    ui.controller.load(ui.key("ollama", "qwen3:8b"))
    ui.events.models(listing({"ollama": ["qwen3:8b"]}))
    ui.controller.pulls.upsert(PullRow(SELF, "ollama", "x:1b", percent=5.0))
    ui.controller.pulls.upsert(PullRow(SELF, "ollama", "x:1b", percent=7.0))
    search.set_query("qwen coding")
    search.set_query("")
    ui.connection.lose_session()
    await settle()
    qtmodeltester.check(target, force_py=True)


async def test_rows_come_from_the_engines_and_discovery_grouped_by_computer(ui: Ui) -> None:
    await start(ui)
    proxy = ui.page.models_tab.proxy
    rows = [proxy.index(i, 0).data(ROW_ROLE) for i in range(proxy.rowCount())]
    assert [(r.key.node, r.engine, r.model) for r in rows] == [
        (SELF, "ollama", "llama3.2:3b"),
        (SELF, "ollama", "qwen3:8b"),
        (SELF, "lmstudio", "openai/gpt-oss-20b"),
        (PEER, "ollama", "qwen3:30b"),
    ]
    assert ui.controller.models.get(PendingKey(SELF, "ollama", "stale:1b")) is None
    assert proxy.index(0, 3).data() == "—"  # this answer carries no sizes (an older broker)
    peer = ui.page.models_tab.actions_for(PendingKey(PEER, "ollama", "qwen3:30b"))
    assert peer is not None and peer.view_only.isVisibleTo(ui.page)
    assert not peer.buttons["load"].isVisibleTo(ui.page)


async def test_pushes_update_rows_without_a_reset(qtbot: QtBot, ui: Ui) -> None:
    await start(ui)
    models = ui.controller.models
    with qtbot.assertNotEmitted(models.modelReset), qtbot.waitSignal(models.dataChanged):
        ui.events.models(
            listing(LOCAL["by_engine"], {"ollama": ["qwen3:8b"]}),
        )
    assert ui.status_of("ollama", "qwen3:8b") == "Loaded"
    assert ui.actions("ollama", "qwen3:8b").buttons["eject"].isEnabled()
    with qtbot.assertNotEmitted(models.modelReset), qtbot.waitSignal(models.rowsRemoved):
        ui.events.models(listing({"ollama": ["qwen3:8b"]}))
    assert models.get(ui.key("lmstudio", "openai/gpt-oss-20b")) is None
    with qtbot.assertNotEmitted(models.modelReset), qtbot.waitSignal(models.rowsInserted):
        event = {"seq": 11, "event": "node_updated", "node_id": PEER, "node": node(
            PEER, "gpu-box", {"ollama": {"models": ["qwen3:30b", "gemma3:4b"]}})}  # fmt: skip
        ui.connection.push(methods.DISCOVERY_EVENT, event)
    assert models.get(PendingKey(PEER, "ollama", "gemma3:4b")) is not None
    ui.connection.push(methods.DISCOVERY_EVENT, {"seq": 12, "event": "node_left", "node_id": PEER})
    assert PEER not in models.nodes()


async def test_sizes_the_engines_report_show_readably_and_the_rest_show_a_dash(
    qtbot: QtBot, ui: Ui
) -> None:
    await start(ui)
    models = ui.controller.models
    sizes = {
        "ollama": {"qwen3:8b": 5_225_376_047},
        "lmstudio": {"openai/gpt-oss-20b": 12_109_565_632},
    }
    with qtbot.assertNotEmitted(models.modelReset), qtbot.waitSignal(models.dataChanged):
        ui.events.models({**listing(LOCAL["by_engine"]), "sizes_by_engine": sizes})

    def size_cell(key: PendingKey) -> tuple[str, str]:
        position = models.position(key)
        assert position is not None
        cell = models.index(position, 3)
        return cell.data(), cell.data(Qt.ItemDataRole.ToolTipRole)

    assert size_cell(ui.key("ollama", "qwen3:8b")) == ("5.2 GB", "5,225,376,047 bytes")
    assert size_cell(ui.key("lmstudio", "openai/gpt-oss-20b"))[0] == "12 GB"
    unknown = size_cell(ui.key("ollama", "llama3.2:3b"))
    assert unknown == ("—", "Ollama does not report this model's size.")
    assert size_cell(PendingKey(PEER, "ollama", "qwen3:30b")) == ("—", REMOTE_SIZE_TIP)


async def test_a_models_event_that_overtakes_the_snapshot_applies_after_it(ui: Ui) -> None:
    answer = never()
    script_session(ui)
    ui.connection.results[methods.ENGINE_SUBSCRIBE.name] = [answer]
    ui.connection.become_ready()
    await wait_until(lambda: bool(ui.connection.called(methods.ENGINE_SUBSCRIBE)))
    ui.events.models(listing({"ollama": ["new:1b"]}))
    answer.set_result({**ui.events.snapshot([engine("ollama")], LOCAL), "seq": 20})
    await wait_until(lambda: ui.controller.engines.loaded)
    await settle()
    assert [r.model for r in ui.controller.models.rows() if r.local] == ["new:1b"]


async def test_a_discovery_gap_subscribes_again(ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 40, "nodes": [SELF_NODE]})
    ui.connection.push(methods.DISCOVERY_EVENT, {"seq": 15, "event": "node_left", "node_id": "x"})
    await wait_until(lambda: PEER not in ui.controller.models.nodes())
    assert [m for m, _ in ui.connection.calls].count(methods.DISCOVERY_SUBSCRIBE.name) == 2


async def test_a_stopped_engine_loses_its_rows_until_it_runs_again(ui: Ui) -> None:
    await start(ui)
    ui.events.state(engine("lmstudio", "stopped"))
    assert ui.controller.models.get(ui.key("lmstudio", "openai/gpt-oss-20b")) is None
    assert ui.controller.pull_engines() == ["ollama"]
    ui.events.state(engine("lmstudio"))
    await wait_until(
        lambda: ui.controller.models.get(ui.key("lmstudio", "openai/gpt-oss-20b")) is not None
    )
    assert ui.controller.pull_engines() == ["ollama", "lmstudio"]


# Pending actions.


@pytest.mark.parametrize(
    ("button", "verb", "truth"),
    [
        ("load", "Loading…", listing(LOCAL["by_engine"], {"ollama": ["qwen3:8b"]})),
        ("delete", "Deleting…", listing({"ollama": ["llama3.2:3b"], "lmstudio": []})),
    ],
)
async def test_pending_shows_at_once_and_clears_on_the_truth(
    monkeypatch: pytest.MonkeyPatch, ui: Ui, button: str, verb: str, truth: Any
) -> None:
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    await start(ui)
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    ui.actions("ollama", "qwen3:8b").buttons[button].click()
    assert ui.status_of("ollama", "qwen3:8b") == verb  # before the loop ran at all
    assert not any(b.isEnabled() for b in ui.actions("ollama", "qwen3:8b").buttons.values())
    await wait_until(lambda: len(ui.action_calls()) == 1)
    ui.events.models(truth)
    assert ui.pending.get(ui.key("ollama", "qwen3:8b")) is None
    answer.set_result({"ok": True})
    await settle()


async def test_eject_clears_when_the_model_is_listed_as_not_loaded(ui: Ui) -> None:
    await start(ui, local=listing({"ollama": ["qwen3:8b"]}, {"ollama": ["qwen3:8b"]}))
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.actions("ollama", "qwen3:8b").buttons["eject"].click()
    assert ui.status_of("ollama", "qwen3:8b") == "Ejecting…"
    ui.events.models(listing({"ollama": ["qwen3:8b"]}))
    assert ui.status_of("ollama", "qwen3:8b") == "On disk"
    assert ui.actions("ollama", "qwen3:8b").buttons["load"].isEnabled()


async def test_an_error_clears_the_pending_state_with_a_message(ui: Ui) -> None:
    await start(ui)
    failures: list[str] = []
    ui.controller.command_failed.connect(failures.append)
    ui.connection.script(methods.ENGINE_ACTION, InternalError("out of memory"))
    ui.actions("ollama", "qwen3:8b").buttons["load"].click()
    await wait_until(lambda: bool(failures))
    assert failures == ["Could not load qwen3:8b (Ollama): out of memory"]
    assert ui.pending.get(ui.key("ollama", "qwen3:8b")) is None
    assert ui.page.notice.isVisibleTo(ui.page)
    assert "out of memory" in ui.page.notice.message.text()
    assert ui.actions("ollama", "qwen3:8b").buttons["load"].isEnabled()


async def test_the_broker_answer_settles_a_model_listed_under_a_fuller_name(ui: Ui) -> None:
    await start(ui, local=listing({"ollama": ["llama3.2:latest"]}))
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    ui.controller.load(ui.key("ollama", "llama3.2"))
    assert ui.pending.action(ui.key("ollama", "llama3.2")) == LOADING
    answer.set_result({"ok": True})
    await wait_until(lambda: ui.pending.get(ui.key("ollama", "llama3.2")) is None)


async def test_a_pending_action_times_out_with_a_message(qtbot: QtBot) -> None:
    ui = await make_ui(qtbot, PendingTimeouts(load=0.05, lmstudio_delete=0.05, default=0.05))
    try:
        await start(ui)
        failures: list[str] = []
        ui.controller.command_failed.connect(failures.append)
        ui.connection.script(methods.ENGINE_ACTION, never())
        ui.actions("ollama", "qwen3:8b").buttons["load"].click()
        assert ui.status_of("ollama", "qwen3:8b") == "Loading…"
        await wait_until(lambda: bool(failures), timeout=5)
        assert "was not confirmed in time" in failures[0]
        assert ui.status_of("ollama", "qwen3:8b") == "On disk"
    finally:
        await close(ui)


async def test_pull_progress_keeps_pulling_alive_past_its_timeout(qtbot: QtBot) -> None:
    ui = await make_ui(qtbot, PendingTimeouts(load=0.3, lmstudio_delete=0.3, default=0.3))
    try:
        await start(ui)
        failures: list[str] = []
        ui.controller.command_failed.connect(failures.append)
        ui.connection.script(methods.ENGINE_ACTION, never())
        ui.controller.pull("ollama", "big:70b")
        key = ui.key("ollama", "big:70b")
        for percent in range(1, 7):  # 0.6 s of progress, twice the timeout
            ui.events.pull(progress("big:70b", float(percent)))
            await asyncio.sleep(0.1)
        assert ui.pending.action(key) == PULLING
        await wait_until(lambda: ui.pending.get(key) is None, timeout=5)  # quiet for too long
        assert failures == []
        assert ui.controller.is_pulling("ollama", "big:70b")  # the row waits for the broker
    finally:
        await close(ui)


async def test_timeouts_follow_the_action_and_engine(
    monkeypatch: pytest.MonkeyPatch, ui: Ui
) -> None:
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    await start(ui)
    ui.connection.script(methods.ENGINE_ACTION, never(), never(), never())
    ui.actions("ollama", "qwen3:8b").buttons["load"].click()
    ui.actions("lmstudio", "openai/gpt-oss-20b").buttons["delete"].click()
    ui.actions("ollama", "llama3.2:3b").buttons["delete"].click()
    timeouts = [
        entry.timeout_s
        for key in (
            ui.key("ollama", "qwen3:8b"),
            ui.key("lmstudio", "openai/gpt-oss-20b"),
            ui.key("ollama", "llama3.2:3b"),
        )
        if (entry := ui.pending.get(key)) is not None
    ]
    assert timeouts == [COLD_LOAD_TIMEOUT_S, LMSTUDIO_DELETE_TIMEOUT_S, MODEL_ACTION_TIMEOUT_S]


async def test_losing_the_broker_clears_everything(ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.ENGINE_ACTION, never(), never())
    ui.controller.load(ui.key("ollama", "qwen3:8b"))
    ui.controller.pull("ollama", "gemma3:4b")
    assert len(ui.pending) == 2
    ui.connection.lose_session()
    assert len(ui.pending) == 0
    assert ui.controller.models.rowCount() == 0
    assert ui.controller.pulls.rowCount() == 0
    assert not ui.page.pull_bar.pull_button.isEnabled()
    assert ui.page.models_tab.empty_note.isVisibleTo(ui.page)


# Delete confirmation.


async def test_delete_asks_first_and_lm_studio_says_it_restarts(
    monkeypatch: pytest.MonkeyPatch, ui: Ui
) -> None:
    await start(ui)
    asked: list[str] = []

    def decline(_parent: QWidget, _title: str, text: str, *_rest: Any) -> Any:
        asked.append(text)
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", decline)
    ui.actions("ollama", "qwen3:8b").buttons["delete"].click()
    ui.actions("lmstudio", "openai/gpt-oss-20b").buttons["delete"].click()
    await settle()
    assert ui.action_calls() == []
    assert len(ui.pending) == 0
    assert "qwen3:8b" in asked[0] and "restarts" not in asked[0]
    assert "LM Studio restarts" in asked[1]
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    ui.connection.script(methods.ENGINE_ACTION, {"ok": True, "restarted": True})
    ui.actions("lmstudio", "openai/gpt-oss-20b").buttons["delete"].click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "lmstudio", "action": "delete_model", "model": "openai/gpt-oss-20b"
    }  # fmt: skip


# Pulls.


def progress(model: str, percent: float | None, **extra: Any) -> dict[str, Any]:
    return {"engine": "ollama", "model": model, "stage": "pulling abc", "percent": percent, **extra}


async def test_pull_progress_survives_hiding_and_showing_the_page(qtbot: QtBot, ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.page.pull_bar.name_edit.setText("gemma3:4b")
    ui.page.pull_bar.pull_button.click()
    key = ui.key("ollama", "gemma3:4b")
    assert ui.pending.action(key) == PULLING
    assert ui.page.pull_bar.name_edit.text() == ""
    ui.events.pull(progress("gemma3:4b", 40.0))
    assert ui.pending.action(key) == PULLING  # until the one terminal push
    item = ui.page.pulls_panel.items[ui.key("ollama", "gemma3:4b")]
    assert item.bar.value() == 400 and "40 %" in item.bar.format()
    ui.page.hide()
    ui.events.pull(progress("gemma3:4b", 60.0))
    ui.page.show()
    assert item.isVisibleTo(ui.page) and item.bar.value() == 600
    again = ModelsPage(ui.controller, Catalog())  # a page built later shows it too
    qtbot.addWidget(again)
    assert again.pulls_panel.items[ui.key("ollama", "gemma3:4b")].bar.value() == 600
    again.pull_bar.name_edit.setText("gemma3:4b")
    assert not again.pull_bar.pull_button.isEnabled()
    assert again.pull_bar.pull_button.text() == "Pulling…"


async def test_a_successful_pull_ends_once_and_the_model_appears(qtbot: QtBot, ui: Ui) -> None:
    await start(ui)
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    ui.controller.pull("ollama", "gemma3:4b")
    ui.events.pull(progress("gemma3:4b", None, stage="x"))
    assert ui.page.pulls_panel.items[ui.key("ollama", "gemma3:4b")].bar.maximum() == 0  # busy bar
    with qtbot.assertNotEmitted(ui.controller.command_failed):
        ui.events.pull(progress("gemma3:4b", 100.0, stage="success", done=True))
        assert ui.pending.get(ui.key("ollama", "gemma3:4b")) is None
        ui.events.models(
            listing({**LOCAL["by_engine"], "ollama": ["gemma3:4b", "qwen3:8b"]}),
        )
        answer.set_result({"ok": True})
        await settle()
    assert ui.controller.pulls.rowCount() == 0
    assert ui.page.pulls_panel.items == {}
    finished = ui.page.pulls_panel.finished
    assert finished.isVisibleTo(ui.page)
    assert finished.message.text() == (
        "gemma3:4b is ready on this computer (Ollama). "
        "Any app can now ask PAIR for the model “gemma3:4b”."
    )
    finished.dismiss.click()
    assert not ui.page.pulls_panel.isVisibleTo(ui.page)
    assert ui.controller.is_installed("ollama", "gemma3:4b")


async def test_a_failed_pull_reports_once_and_can_be_dismissed(qtbot: QtBot, ui: Ui) -> None:
    await start(ui)
    failures: list[str] = []
    ui.controller.command_failed.connect(failures.append)
    ui.connection.script(methods.ENGINE_ACTION, InternalError("pull of nope:1b failed: not found"))
    terminal = progress("nope:1b", None, stage="error", done=True, error="file does not exist")
    ui.controller.pull("ollama", "nope:1b")
    ui.events.pull(terminal)
    await wait_until(lambda: len(ui.action_calls()) == 1)
    await settle()
    assert failures == ["Could not pull nope:1b (Ollama): file does not exist"]
    assert not ui.page.notice.isVisibleTo(ui.page)  # the pull's own row says it
    item = ui.page.pulls_panel.items[ui.key("ollama", "nope:1b")]
    assert item.error.isVisibleTo(ui.page)
    assert item.error.text() == (
        "Pull failed: Ollama has no model called nope:1b: check its name on ollama.com."
    )
    assert item.error.toolTip() == "Ollama said: file does not exist"
    item.dismiss.click()
    assert ui.controller.pulls.rowCount() == 0


async def test_a_pull_that_fails_without_a_terminal_push_ends_on_the_error(ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.ENGINE_ACTION, InternalError("LM Studio stopped answering"))
    ui.controller.pull("lmstudio", "qwen/qwen3-8b")
    await wait_until(lambda: ui.controller.pulls.rowCount() == 1 and
                     ui.controller.pulls.row_at(0).failed)  # fmt: skip
    assert ui.pending.get(ui.key("lmstudio", "qwen/qwen3-8b")) is None


async def test_pulls_in_the_snapshot_show_and_a_gap_drops_one_that_ended_unseen(ui: Ui) -> None:
    elsewhere = progress("gemma3:4b", 30.0)  # started before this app connected (the CLI)
    await start(ui, pulls=(elsewhere,))
    item = ui.page.pulls_panel.items[ui.key("ollama", "gemma3:4b")]
    assert item.bar.value() == 300
    assert ui.controller.is_pulling("ollama", "gemma3:4b")
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.controller.pull("ollama", "mine:1b")  # this app's own pull, not yet reported
    await wait_until(lambda: len(ui.action_calls()) == 1)
    ui.events.script(engine("ollama"), engine("lmstudio"), models=LOCAL)
    ui.events.seq += 5  # events were missed, the other pull's end among them
    ui.events.pull(progress("mine:1b", 10.0))
    await wait_until(lambda: not ui.controller.pulls.active(ui.key("ollama", "gemma3:4b")))
    assert ui.controller.pulls.get(ui.key("ollama", "mine:1b")) is not None  # its answer ends it
    assert ui.pending.action(ui.key("ollama", "mine:1b")) == PULLING


# The hub.


def hub_button(ui: Ui, entry: str, engine: str) -> QPushButton:
    pulls = ui.page.hub.entry_pulls(entry)
    assert pulls is not None
    return pulls.buttons[engine]  # type: ignore[index]


async def test_hub_search_filters_and_pulls_through_the_same_flow(ui: Ui) -> None:
    await start(ui)
    hub = ui.page.hub
    ui.page.tabs.setCurrentWidget(hub)
    assert len(hub.visible_entries()) == len(load_catalog().entries)
    hub.search.setText("CODING qwen")
    assert hub.visible_entries() == ["qwen3-4b", "qwen3-14b", "qwen3-coder-30b", "qwen2.5-coder-7b"]
    hub.search.setText("no such model anywhere")
    assert hub.visible_entries() == [] and hub.no_match.isVisibleTo(ui.page)
    hub.search.setText("")
    assert hub_button(ui, "qwen3-8b", "ollama").text() == "On Ollama"
    assert not hub_button(ui, "qwen3-8b", "ollama").isEnabled()
    ui.connection.script(methods.ENGINE_ACTION, never())
    button = hub_button(ui, "gemma3-4b", "lmstudio")
    assert button.isEnabled()
    button.click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "lmstudio", "action": "pull_model", "model": "google/gemma-3-4b"
    }  # fmt: skip
    assert hub_button(ui, "gemma3-4b", "lmstudio").text() == "Pulling…"
    assert ui.key("lmstudio", "google/gemma-3-4b") in ui.page.pulls_panel.items


async def test_hub_pull_needs_the_engine_running(ui: Ui) -> None:
    await start(ui)
    ui.events.state(engine("lmstudio", "stopped"))
    button = hub_button(ui, "gemma3-4b", "lmstudio")
    assert not button.isEnabled()
    assert (
        button.toolTip()
        == "LM Studio is not running on this computer: start it on the Engines page."
    )


async def test_a_broken_catalogue_leaves_an_empty_hub_and_a_working_page(qtbot: QtBot) -> None:
    broken = Catalog(error="The model catalogue (x.json) could not be read: Expected `object`")
    ui = await make_ui(qtbot, catalog=broken)
    try:
        await start(ui)
        ui.page.tabs.setCurrentWidget(ui.page.hub)
        assert ui.page.hub.error.isVisibleTo(ui.page)
        assert "could not be read" in ui.page.hub.error.text()
        assert ui.page.hub.visible_entries() == []
        assert not ui.page.hub.no_match.isVisibleTo(ui.page)
        ui.page.tabs.setCurrentWidget(ui.page.models_tab)
        assert ui.actions("ollama", "qwen3:8b").buttons["load"].isEnabled()
    finally:
        await close(ui)


# Other members.

MEMBER = "node-member"
MEMBER_MODELS = listing(
    {"ollama": ["phi4:14b"], "lmstudio": ["qwen/qwen3-8b"]}, {"ollama": ["phi4:14b"]}
)


def member(
    models: Any = MEMBER_MODELS,
    *,
    reachable: bool = True,
    pulls: tuple[dict[str, Any], ...] = (),
    engines: tuple[str, ...] = ("ollama", "lmstudio"),
) -> dict[str, Any]:
    """Another member's ``MemberEngines``: its running engines, models and pulls."""
    return {
        "node_id": MEMBER, "name": "laptop", "reachable": reachable,
        "engines": [engine(name) for name in engines], "models": models, "pulls": list(pulls),
    }  # fmt: skip


def member_key(engine_name: str, model: str) -> PendingKey:
    return PendingKey(MEMBER, engine_name, model)


async def start_with_member(ui: Ui, **fields: Any) -> None:
    script_session(ui, members=(member(**fields),))
    ui.connection.become_ready()
    await wait_until(lambda: MEMBER in ui.controller.models.nodes())
    await settle()


def member_actions(ui: Ui, engine_name: str, model: str) -> RowActions:
    widget = ui.page.models_tab.actions_for(member_key(engine_name, model))
    assert widget is not None
    return widget


async def test_a_members_models_are_managed_like_this_computers(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await start_with_member(ui)
    models = ui.controller.models
    qtmodeltester.check(models, force_py=True)
    row = models.get(member_key("ollama", "phi4:14b"))
    assert row is not None and row.member and row.managed and row.loaded
    proxy = ui.page.models_tab.proxy
    computers = [proxy.index(i, 0).data() for i in range(proxy.rowCount())]
    assert computers.index("laptop") > computers.index("This computer")
    assert models.status_text(row) == "Loaded"
    actions = member_actions(ui, "ollama", "phi4:14b")
    assert not actions.view_only.isVisibleTo(ui.page)
    assert actions.buttons["eject"].isEnabled() and not actions.buttons["load"].isEnabled()
    ui.connection.script(methods.ENGINE_ACTION, never())
    actions.buttons["eject"].click()
    assert models.status_text(row) == "Ejecting…"
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls() == [
        {"engine": "ollama", "action": "unload_model", "model": "phi4:14b", "node": MEMBER}
    ]
    ui.events.models(listing(LOCAL["by_engine"]))  # this computer's list: not the member's truth
    assert ui.pending.action(member_key("ollama", "phi4:14b")) == EJECTING
    ui.events.member(member(listing(MEMBER_MODELS["by_engine"])))
    assert ui.pending.get(member_key("ollama", "phi4:14b")) is None
    ejected = models.get(member_key("ollama", "phi4:14b"))
    assert ejected is not None and models.status_text(ejected) == "On disk"
    qtmodeltester.check(models, force_py=True)


async def test_a_members_failed_action_names_the_member(ui: Ui) -> None:
    await start_with_member(ui)
    ui.connection.script(methods.ENGINE_ACTION, InternalError("out of memory"))
    member_actions(ui, "lmstudio", "qwen/qwen3-8b").buttons["load"].click()
    await wait_until(lambda: ui.page.notice.isVisibleTo(ui.page))
    assert ui.page.notice.message.text() == (
        "Could not load qwen/qwen3-8b (LM Studio) on laptop: out of memory"
    )
    assert ui.pending.get(member_key("lmstudio", "qwen/qwen3-8b")) is None


async def test_delete_on_a_member_asks_the_same_and_sends_its_node(
    monkeypatch: pytest.MonkeyPatch, ui: Ui
) -> None:
    await start_with_member(ui)
    asked: list[str] = []

    def decline(_parent: QWidget, _title: str, text: str, *_rest: Any) -> Any:
        asked.append(text)
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", decline)
    member_actions(ui, "lmstudio", "qwen/qwen3-8b").buttons["delete"].click()
    await settle()
    assert ui.action_calls() == [] and len(ui.pending) == 0
    assert asked[0].startswith("Delete qwen/qwen3-8b from LM Studio on laptop?")
    assert "LM Studio restarts" in asked[0]
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    ui.connection.script(methods.ENGINE_ACTION, never())
    member_actions(ui, "lmstudio", "qwen/qwen3-8b").buttons["delete"].click()
    entry = ui.pending.get(member_key("lmstudio", "qwen/qwen3-8b"))
    assert entry is not None and entry.timeout_s == LMSTUDIO_DELETE_TIMEOUT_S
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "lmstudio", "action": "delete_model", "model": "qwen/qwen3-8b", "node": MEMBER
    }  # fmt: skip
    ui.events.member(member(listing({"ollama": ["phi4:14b"], "lmstudio": []})))
    assert ui.pending.get(member_key("lmstudio", "qwen/qwen3-8b")) is None
    assert ui.controller.models.get(member_key("lmstudio", "qwen/qwen3-8b")) is None


async def test_a_pull_on_a_member_shows_progress_from_its_pulls(ui: Ui) -> None:
    await start_with_member(ui)
    bar = ui.page.pull_bar
    assert bar.node_combo.isVisibleTo(ui.page)
    assert [bar.node_combo.itemText(i) for i in range(bar.node_combo.count())] == [
        "This computer", "laptop"]  # fmt: skip
    bar.node_combo.setCurrentIndex(1)
    bar.node_combo.activated.emit(1)
    assert ui.controller.pull_node == MEMBER
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    bar.name_edit.setText("gemma3:4b")
    bar.pull_button.click()
    key = member_key("ollama", "gemma3:4b")
    assert ui.pending.action(key) == PULLING
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "ollama", "action": "pull_model", "model": "gemma3:4b", "node": MEMBER
    }  # fmt: skip
    item = ui.page.pulls_panel.items[key]
    assert "on laptop" in item.title.text()
    ui.events.pull(progress("gemma3:4b", 80.0))  # this computer's pull of the same name
    assert item.bar.maximum() == 0, "the member's pull has no progress yet"
    ui.events.member(member(pulls=(progress("gemma3:4b", 40.0),)))
    assert item.bar.value() == 400 and "40 %" in item.bar.format()
    bar.name_edit.setText("gemma3:4b")
    assert not bar.pull_button.isEnabled() and bar.pull_button.text() == "Pulling…"
    done = progress("gemma3:4b", 100.0, stage="success", done=True)
    with_model = listing({**MEMBER_MODELS["by_engine"], "ollama": ["gemma3:4b", "phi4:14b"]})
    ui.events.member(member(with_model, pulls=(done,)))
    assert ui.pending.get(key) is None
    assert key not in ui.page.pulls_panel.items
    assert ui.controller.is_installed("ollama", "gemma3:4b", MEMBER)
    answer.set_result({"ok": True})
    await settle()


async def test_a_failed_pull_on_a_member_keeps_its_reason(ui: Ui) -> None:
    await start_with_member(ui)
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.controller.pull("ollama", "nope:1b", MEMBER)
    failed = progress("nope:1b", None, stage="error", done=True, error="file does not exist")
    failures: list[str] = []
    ui.controller.command_failed.connect(failures.append)
    ui.events.member(member(pulls=(failed,)))
    item = ui.page.pulls_panel.items[member_key("ollama", "nope:1b")]
    assert item.error.isVisibleTo(ui.page) and "no model called nope:1b" in item.error.text()
    assert "file does not exist" in item.error.toolTip()
    assert failures == ["Could not pull nope:1b (Ollama) on laptop: file does not exist"]
    ui.events.member(member())  # the member no longer lists it: the failed row stays
    item.dismiss.click()
    assert ui.controller.pulls.rowCount() == 0


async def test_the_hub_pulls_on_the_chosen_member(ui: Ui) -> None:
    await start_with_member(ui, models=listing({"ollama": ["phi4:14b"]}), engines=("ollama",))
    ui.controller.set_pull_node(MEMBER)
    assert hub_button(ui, "qwen3-8b", "ollama").text() == "Pull · Ollama"  # not on laptop
    button = hub_button(ui, "gemma3-4b", "lmstudio")
    assert not button.isEnabled() and "on laptop" in button.toolTip()
    ui.connection.script(methods.ENGINE_ACTION, never())
    hub_button(ui, "gemma3-4b", "ollama").click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0]["node"] == MEMBER
    assert hub_button(ui, "gemma3-4b", "ollama").text() == "Pulling…"


async def test_an_unreachable_member_shows_its_models_as_last_seen(ui: Ui) -> None:
    await start_with_member(ui)
    ui.controller.set_pull_node(MEMBER)
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.controller.load(member_key("lmstudio", "qwen/qwen3-8b"))
    assert len(ui.pending) == 1
    ui.events.member(member(reachable=False))
    assert len(ui.pending) == 0  # nothing there can be confirmed while it is away
    row = ui.controller.models.get(member_key("lmstudio", "qwen/qwen3-8b"))
    assert row is not None and ui.controller.models.status_text(row) == "On disk (offline)"
    actions = member_actions(ui, "lmstudio", "qwen/qwen3-8b")
    assert not any(button.isEnabled() for button in actions.buttons.values())
    assert actions.buttons["load"].toolTip() == "laptop cannot be reached"
    assert ui.controller.pull_node is None  # pulls go back to this computer
    assert ui.page.pull_bar.node_combo.isHidden()


async def test_a_member_that_leaves_loses_its_rows(ui: Ui) -> None:
    await start_with_member(ui)
    ui.events.member_left(MEMBER)
    assert MEMBER not in ui.controller.models.nodes()
    assert ui.page.pull_bar.node_combo.isHidden()


# Model details (llama.cpp reads them from the GGUF file).

GGUF_DETAILS = {
    "llamacpp": {
        "qwen2.5-0.5b": {
            "file": "qwen2.5-0.5b-instruct-q4_k_m.gguf",
            "architecture": "qwen2",
            "quantization": "Q4_K_M",
            "context_length": 32768,
        },
        "odd": {"context_length": 1000},
    }
}


def details_cell(ui: Ui, key: PendingKey) -> tuple[str, str | None]:
    models = ui.controller.models
    position = models.position(key)
    assert position is not None
    cell = models.index(position, ModelsModel.DETAILS_COLUMN)
    return cell.data(), cell.data(Qt.ItemDataRole.ToolTipRole)


async def test_model_details_show_compactly_where_the_engine_reads_them(
    qtbot: QtBot, qtmodeltester: ModelTester, ui: Ui
) -> None:
    await start(ui)
    table = ui.page.models_tab.table
    assert table.isColumnHidden(ModelsModel.DETAILS_COLUMN), "no details: no column of blanks"
    assert (
        ui.controller.models.headerData(ModelsModel.DETAILS_COLUMN, Qt.Orientation.Horizontal)
        == "Details"
    )
    by_engine = {**LOCAL["by_engine"], "llamacpp": ["qwen2.5-0.5b", "odd", "bare"]}
    with qtbot.waitSignal(ui.controller.models.rowsInserted):
        ui.events.models({**listing(by_engine), "details_by_engine": GGUF_DETAILS})
    qtmodeltester.check(ui.controller.models, force_py=True)
    text, tip = details_cell(ui, ui.key("llamacpp", "qwen2.5-0.5b"))
    assert text == "qwen2 · Q4_K_M · 32K context"
    assert tip == (
        "Architecture: qwen2\nQuantization: Q4_K_M\nContext length: 32,768 tokens\n"
        "File: qwen2.5-0.5b-instruct-q4_k_m.gguf"
    )
    assert details_cell(ui, ui.key("llamacpp", "odd")) == (
        "1,000 context",
        "Context length: 1,000 tokens",
    )
    assert details_cell(ui, ui.key("llamacpp", "bare")) == ("", None)
    assert details_cell(ui, ui.key("ollama", "qwen3:8b")) == ("", None)
    assert not table.isColumnHidden(ModelsModel.DETAILS_COLUMN)
    ui.events.models(listing(LOCAL["by_engine"]))  # llama.cpp stopped
    await settle()
    assert table.isColumnHidden(ModelsModel.DETAILS_COLUMN)


async def test_a_members_model_details_show_too(ui: Ui) -> None:
    theirs = {**listing({"llamacpp": ["qwen2.5-0.5b"]}), "details_by_engine": GGUF_DETAILS}
    await start_with_member(ui, models=theirs, engines=("llamacpp",))
    key = member_key("llamacpp", "qwen2.5-0.5b")
    assert details_cell(ui, key)[0] == "qwen2 · Q4_K_M · 32K context"
    assert not ui.page.models_tab.table.isColumnHidden(ModelsModel.DETAILS_COLUMN)


async def test_a_model_file_address_is_pulled_and_tracked_under_its_file_name(
    qtbot: QtBot, ui: Ui
) -> None:
    """llama.cpp pulls a .gguf by its address; the broker saves it under the file's name."""
    await start(ui)
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    url = "https://example.org/models/Qwen3-0.6B-Q8_0.gguf?download=1"
    ui.page.pull_bar.name_edit.setText(url)
    ui.controller.pull("llamacpp", url)
    await wait_until(lambda: len(ui.action_calls()) == 1)
    call = ui.action_calls()[0]
    assert (call["model"], call["url"]) == ("Qwen3-0.6B-Q8_0", url)
    key = ui.key("llamacpp", "Qwen3-0.6B-Q8_0")
    with qtbot.assertNotEmitted(ui.controller.command_failed):
        ui.events.pull(
            {
                "engine": "llamacpp",
                "model": "Qwen3-0.6B-Q8_0",
                "stage": "downloading",
                "percent": 40.0,
                "completed": 40,
                "total": 100,
            }
        )
        assert ui.page.pulls_panel.items[key].bar.value() == 400
        ui.events.pull(
            {
                "engine": "llamacpp",
                "model": "Qwen3-0.6B-Q8_0",
                "stage": "success",
                "percent": 100.0,
                "done": True,
            }
        )
        answer.set_result({"ok": True})
        await settle()
    assert ui.pending.get(key) is None
