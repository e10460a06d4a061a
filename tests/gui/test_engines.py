"""The Engines page against a scripted connection: rows, pushes, pending actions, ports, peers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QAbstractButton, QLabel
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.controllers.engines import EnginesController
from app.models.engines import (
    PENDING_ROLE,
    READ_ONLY_ROLE,
    EngineCommand,
    EngineRow,
    EnginesModel,
    Expectation,
    confirms,
    door_ports,
    parse_port,
)
from app.pending import PendingActions, PendingKey
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.engine_card import EngineCard, switch_on
from app.window.engines_page import EnginesPage, NodeHeader
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import Conflict, InternalError
from backend.protocol.types.engines import EngineStatus
from tests.gui.font_checks import digits_line_up
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until

SELF = "self-node"
PEER = "peer-node"


def engine(name: str, state: str = "stopped", revision: int = 1, **extra: Any) -> dict[str, Any]:
    facts = {
        "ollama": ("Ollama", "ollama", 11435),
        "lmstudio": ("LM Studio", "openai", 1235),
        "llamacpp": ("llama.cpp (llama-server)", "llamacpp", 8081),
    }
    display, door, port = facts[name]
    return {
        "engine": name, "display_name": display, "front_door": door, "mode": "process",
        "installed": state != "not-installed", "state": state, "port": port,
        "default_port": port, "revision": revision, **extra,
    }  # fmt: skip


def broker_status() -> dict[str, Any]:
    return {
        "version": "1", "pid": 1, "started_at": 0.0, "uptime_ms": 1, "data_dir": "/d",
        "node_id": SELF, "node_name": "desk", "control_address": "x", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [],
        "front_doors": {"ollama": "http://127.0.0.1:11434", "openai": "http://127.0.0.1:1240"},
    }  # fmt: skip


def peer(reachable: bool = True, **engines: list[str]) -> dict[str, Any]:
    return {
        "node_id": PEER, "name": "gpu-box", "kind": "pair", "sources": ["mdns"],
        "addresses": ["192.168.1.42"], "reachable": reachable,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "engines": {name: {"models": models, "loaded": models[:1]}
                    for name, models in engines.items()},
    }  # fmt: skip


def myself() -> dict[str, Any]:
    return {
        "node_id": SELF, "name": "desk", "kind": "pair", "sources": ["self"],
        "addresses": ["127.0.0.1"], "ports": {}, "engines": {"ollama": {"models": ["x"]}},
        "reachable": True,
    }  # fmt: skip


@dataclass
class Ui:
    connection: FakeConnection
    store: PendingActions
    model: EnginesModel
    controller: EnginesController
    page: EnginesPage
    events: EngineEvents

    def card(self, name: str, node: str = SELF) -> EngineCard:
        card = self.page.card(node, name)
        assert card is not None, name
        return card

    def row(self, name: str, node: str = SELF) -> EngineRow:
        row = self.model.get((node, name))
        assert row is not None, name
        return row

    def calls(self, method: Method[Any, Any]) -> list[Any]:
        return self.connection.called(method)

    async def ready(self, *statuses: dict[str, Any], nodes: list[Any] | None = None) -> None:
        self.connection.script(methods.STATUS, broker_status())
        self.events.script(*statuses)
        self.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 3, "nodes": nodes or []})
        self.connection.become_ready()
        await wait_until(lambda: self.model.rowCount() >= len(statuses))
        await wait_until(lambda: bool(self.calls(methods.DISCOVERY_SUBSCRIBE)))
        await settle()


def make_ui(qtbot: QtBot, timeout_s: float = 60.0) -> Ui:
    connection = FakeConnection()
    store = PendingActions()
    model = EnginesModel()
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    controller = EnginesController(
        connection, model, store, engines, discovery, SettingsStore(connection), timeout_s=timeout_s
    )
    page = EnginesPage(connection, model, controller)
    qtbot.addWidget(page)
    page.resize(800, 900)
    page.show()
    return Ui(connection, store, model, controller, page, EngineEvents(connection))


async def close_ui(ui: Ui) -> None:
    await ui.controller.close()
    await ui.controller.engines.close()
    await ui.controller.discovery.close()
    await ui.connection.stop()
    ui.store.clear_all()


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = make_ui(qtbot)
    yield made
    await close_ui(made)


@pytest.fixture
async def quick_ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    """Pending actions time out after 0.1 s."""
    made = make_ui(qtbot, timeout_s=0.1)
    yield made
    await close_ui(made)


def never(ui: Ui) -> asyncio.Future[Any]:
    """A call result that never arrives (the broker is still working)."""
    return asyncio.get_running_loop().create_future()


def headers(ui: Ui) -> list[NodeHeader]:
    return list(ui.page.headers)


def header(ui: Ui, title: str) -> NodeHeader:
    found = [h for h in ui.page.headers if h.title.text() == f"<b>{title}</b>"]
    assert len(found) == 1, [h.title.text() for h in ui.page.headers]
    return found[0]


def enabled_buttons(card: EngineCard) -> list[QAbstractButton]:
    return [
        button
        for button in card.findChildren(QAbstractButton)
        if button.isEnabled() and button.isVisibleTo(card)
    ]


# -- the model ---------------------------------------------------------------------------------


async def test_model_contract_with_local_and_remote_rows(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await ui.ready(
        engine("ollama", "running"), engine("lmstudio"), engine("llamacpp", "not-installed"),
        nodes=[myself(), peer(ollama=["llama3", "qwen"])],
    )  # fmt: skip
    await wait_until(lambda: ui.model.rowCount() == 4)
    qtmodeltester.check(ui.model, force_py=True)
    peer_row, own_row = ui.model.position((PEER, "ollama")), ui.model.position((SELF, "ollama"))
    assert peer_row is not None and own_row is not None
    assert ui.model.data(ui.model.index(peer_row, 0), READ_ONLY_ROLE) is True
    assert ui.model.data(ui.model.index(own_row, 0), READ_ONLY_ROLE) is False
    assert ui.model.headerData(2, Qt.Orientation.Horizontal) == "State"
    assert b"pending" in ui.model.roleNames().values()


async def test_snapshot_rows_and_front_door_ports(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", pid=7, slots=4), engine("lmstudio"))
    ollama = ui.row("ollama")
    assert (ollama.node_id, ollama.node_name, ollama.port, ollama.door_port) == (
        SELF, "desk", 11435, 11434)  # fmt: skip
    assert ui.row("lmstudio").door_port == 1240  # the door's real port, not the configured one
    assert ui.card("ollama").state_label.text() == "Running"
    assert "11434" in ui.card("ollama").door_port.text()
    assert isinstance(ui.card("ollama").door_port, QLabel)  # shown, never edited here
    assert ui.calls(methods.ENGINE_GET_INSTALLED)  # detection runs again on connect


async def test_pushes_update_rows_without_reset(qtbot: QtBot, ui: Ui) -> None:
    await ui.ready(engine("ollama"), engine("lmstudio"))
    with qtbot.assertNotEmitted(ui.model.modelReset), qtbot.waitSignal(ui.model.dataChanged) as sig:
        ui.events.state(engine("lmstudio", "running", 2))
    assert sig.args[0].row() == 1
    assert ui.row("lmstudio").state == "running"
    assert ui.card("lmstudio").state_label.text() == "Running"
    assert ui.card("lmstudio").switch.isChecked()
    with qtbot.assertNotEmitted(ui.model.modelReset), qtbot.waitSignal(ui.model.dataChanged):
        ui.events.install(
            {"engine": "ollama", "stage": "downloading", "percent": 30.0},
        )
    card = ui.card("ollama")
    assert card.progress.isVisibleTo(card)
    assert card.progress.value() == 30


async def test_events_that_overtake_the_snapshot_do_not_roll_it_back(ui: Ui) -> None:
    snapshot: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ui.connection.script(methods.STATUS, broker_status())
    ui.connection.script(methods.ENGINE_SUBSCRIBE, snapshot)
    ui.connection.become_ready()
    await settle()
    ui.events.seq = 4
    ui.events.state(engine("ollama", "starting", 4))  # seq 5: the snapshot covers it
    ui.events.state(engine("lmstudio", "running", 9))  # seq 6: newer than the snapshot
    engines = [engine("ollama", "running", 4), engine("lmstudio", "starting", 8)]
    snapshot.set_result({**ui.events.snapshot(engines), "seq": 5})
    await wait_until(lambda: ui.model.rowCount() == 2)
    await settle()
    assert ui.row("ollama").state == "running"
    assert ui.row("lmstudio").state == "running"


# -- pending actions ---------------------------------------------------------------------------


async def test_start_is_pending_at_once_and_clears_on_the_state_change(ui: Ui) -> None:
    await ui.ready(engine("lmstudio", revision=5))
    ui.connection.script(methods.ENGINE_START, never(ui))
    card = ui.card("lmstudio")
    card.switch.click()
    assert ui.store.action(PendingKey(SELF, "lmstudio")) == "Starting"
    assert card.state_label.text() == "Starting…"
    assert card.switch.isChecked()
    assert not card.switch.isEnabled()
    assert not card.port_edit.isEnabled()
    assert ui.model.data(ui.model.index(0, 0), PENDING_ROLE) == "Starting"
    await settle()
    assert ui.calls(methods.ENGINE_START) == [{"engine": "lmstudio"}]
    ui.events.state(engine("lmstudio", "starting", 6))
    assert card.state_label.text() == "Starting…"  # not the outcome yet
    ui.events.state(engine("lmstudio", "running", 6, pid=9))
    assert ui.store.get(PendingKey(SELF, "lmstudio")) is None
    assert card.state_label.text() == "Running"
    assert card.switch.isEnabled()
    assert card.restart_button.isEnabled()


async def test_a_stale_push_does_not_confirm_a_restart(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", revision=3))
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    card = ui.card("ollama")
    card.restart_button.click()
    assert card.state_label.text() == "Restarting…"
    assert not card.restart_button.isEnabled()
    ui.events.state(engine("ollama", "running", 3))
    assert ui.row("ollama").pending == "Restarting"
    for state in ("stopping", "stopped", "starting"):
        ui.events.state(engine("ollama", state, 4))
    assert ui.row("ollama").pending == "Restarting"
    ui.events.state(engine("ollama", "running", 4))
    assert ui.row("ollama").pending is None


async def test_an_error_state_clears_the_pending_start_and_shows_why(ui: Ui) -> None:
    await ui.ready(engine("llamacpp"))
    ui.connection.script(methods.ENGINE_START, never(ui))
    ui.card("llamacpp").switch.click()
    ui.events.state(
        engine("llamacpp", "error", 2, error="llama.cpp exited with code 1 before it was ready"),
    )
    card = ui.card("llamacpp")
    assert ui.row("llamacpp").pending is None
    assert card.state_label.text() == "Error"
    assert card.notice.isVisibleTo(card)
    assert "exited with code 1" in card.notice.text()


async def test_the_command_answer_settles_when_no_push_comes(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", revision=2))
    # Starting an engine that already runs answers without any state change.
    ui.connection.script(methods.ENGINE_START, engine("ollama", "running", 3))
    ui.controller.set_running("ollama", True)
    assert ui.row("ollama").pending == "Starting"
    await wait_until(lambda: ui.row("ollama").pending is None)
    assert ui.row("ollama").state == "running"
    assert not ui.card("ollama").notice.isVisibleTo(ui.card("ollama"))


async def test_an_rpc_error_settles_and_shows_the_message(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", revision=2))
    refused = Conflict("Ollama on port 11435 was not started by PAIR, so PAIR will not stop it")
    ui.connection.script(methods.ENGINE_STOP, refused)
    card = ui.card("ollama")
    card.switch.click()
    assert card.state_label.text() == "Stopping…"
    assert not card.switch.isChecked()
    await wait_until(lambda: ui.row("ollama").pending is None)
    assert card.state_label.text() == "Running"
    assert card.switch.isChecked()
    assert card.notice.isVisibleTo(card)
    assert card.notice.text() == f"Could not stop: {refused.message}"
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    card.restart_button.click()
    assert not card.notice.isVisibleTo(card)  # a new action starts with a clean slate


async def test_an_unconfirmed_action_times_out(quick_ui: Ui) -> None:
    ui = quick_ui
    await ui.ready(engine("ollama", "running", revision=2))
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    card = ui.card("ollama")
    card.restart_button.click()
    assert card.state_label.text() == "Restarting…"
    await wait_until(lambda: ui.row("ollama").pending is None, timeout=5)
    assert "did not confirm in time" in card.notice.text()
    assert card.notice.isVisibleTo(card)
    assert card.restart_button.isEnabled()
    # The truth arriving late replaces the warning.
    ui.events.state(engine("ollama", "running", 3))
    assert not card.notice.isVisibleTo(card)


async def test_install_shows_progress_and_clears_on_the_last_event(ui: Ui) -> None:
    await ui.ready(engine("llamacpp", "not-installed"))
    ui.connection.script(methods.ENGINE_INSTALL, never(ui))
    card = ui.card("llamacpp")
    assert card.install_button.isVisibleTo(card)
    assert not card.switch.isVisibleTo(card)
    card.install_button.click()
    assert card.state_label.text() == "Installing…"
    assert not card.install_button.isEnabled()
    assert card.progress.isVisibleTo(card)
    progress = {"engine": "llamacpp", "stage": "downloading", "percent": 42.0}
    ui.events.install(progress)
    assert card.progress.value() == 42
    assert "downloading" in card.progress.format()
    ui.events.install({**progress, "stage": "unpacking",
                                                         "percent": None})  # fmt: skip
    assert card.progress.maximum() == 0  # not measurable: a busy bar
    ui.events.install(
        {"engine": "llamacpp", "stage": "installed", "percent": 100.0, "done": True},
    )
    assert ui.row("llamacpp").pending is None
    assert not card.progress.isVisibleTo(card)
    ui.events.state(engine("llamacpp", "stopped", 2))
    assert card.switch.isVisibleTo(card)
    assert not card.install_button.isVisibleTo(card)


async def test_an_install_in_progress_before_connecting_shows_its_progress(ui: Ui) -> None:
    ui.connection.script(methods.STATUS, broker_status())
    installing = {"engine": "llamacpp", "stage": "downloading", "percent": 64.0}
    ui.events.script(engine("llamacpp", "not-installed"), installs=[installing])
    ui.connection.become_ready()
    await wait_until(lambda: ui.model.rowCount() == 1)
    card = ui.card("llamacpp")
    assert card.progress.isVisibleTo(card) and card.progress.value() == 64
    ui.events.install({**installing, "stage": "installed", "percent": 100.0, "done": True})
    assert not card.progress.isVisibleTo(card)


async def test_a_failed_install_shows_its_error(ui: Ui) -> None:
    await ui.ready(engine("llamacpp", "not-installed"))
    ui.connection.script(methods.ENGINE_INSTALL, never(ui))
    ui.controller.install("llamacpp")
    ui.events.install(
        {"engine": "llamacpp", "stage": "error", "done": True, "error": "offline"},
    )
    card = ui.card("llamacpp")
    assert ui.row("llamacpp").pending is None
    assert card.notice.text() == "Install failed: offline"
    assert card.install_button.isEnabled()


async def test_disconnect_clears_pending_and_shows_disconnected(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running"), nodes=[peer(ollama=["a"])])
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    ui.card("ollama").restart_button.click()
    ui.store.begin(PendingKey(SELF, "ollama", "llama3"), "Loading")  # a model action elsewhere
    assert len(ui.store) == 2
    ui.connection.lose_session()
    assert len(ui.store) == 0
    assert ui.model.rowCount() == 0
    await settle()
    assert ui.page.cards == {}
    assert ui.page.connection_note.isVisibleTo(ui.page)
    assert "Disconnected" in ui.page.connection_note.text()
    await ui.ready(engine("ollama", "running"))
    assert not ui.page.connection_note.isVisibleTo(ui.page)
    assert ui.row("ollama").pending is None


async def test_a_failed_read_is_explained_with_a_retry(ui: Ui) -> None:
    ui.connection.script(methods.STATUS, broker_status(), broker_status())
    ui.connection.script(methods.ENGINE_SUBSCRIBE, InternalError("engines component is down"))
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.problem is not None)
    assert ui.page.problem.isVisibleTo(ui.page)
    assert "engines component is down" in ui.page.problem.text()
    ui.events.script(engine("ollama"))
    ui.page.retry_button.click()
    await wait_until(lambda: ui.model.rowCount() == 1)
    assert not ui.page.problem.isVisibleTo(ui.page)


# -- ports -------------------------------------------------------------------------------------


@pytest.mark.parametrize("typed", ["80", "1023", "65536", "abc", "", "12 34", "-5"])
async def test_a_bad_port_is_refused_without_asking_the_broker(ui: Ui, typed: str) -> None:
    await ui.ready(engine("ollama", "running"))
    card = ui.card("ollama")
    card.port_edit.setText(typed)
    card.apply_port_button.click()
    await settle()
    assert ui.calls(methods.ENGINE_SET_PORT) == []
    assert card.port_error.isVisibleTo(card)
    assert "1024" in card.port_error.text() and "65535" in card.port_error.text()
    assert ui.row("ollama").pending is None


async def test_a_taken_port_shows_the_brokers_message(ui: Ui) -> None:
    await ui.ready(engine("lmstudio"))
    ui.connection.script(methods.ENGINE_SET_PORT, Conflict("port 1236 is already in use"))
    card = ui.card("lmstudio")
    card.port_edit.setText("1236")
    card.port_edit.setModified(True)
    card.port_edit.returnPressed.emit()
    assert card.state_label.text() == "Changing port…"
    await wait_until(lambda: ui.row("lmstudio").pending is None)
    assert ui.calls(methods.ENGINE_SET_PORT) == [{"engine": "lmstudio", "port": 1236}]
    assert card.port_error.text() == "Port 1236 is already in use"
    assert card.port_edit.text() == "1236"  # what the user typed stays for correction
    assert card.state_label.text() == "Stopped"


async def test_a_port_change_clears_on_the_new_port(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", revision=1))
    ui.connection.script(methods.ENGINE_SET_PORT, never(ui))
    card = ui.card("ollama")
    card.port_edit.setText(" 11500 ")
    card.apply_port_button.click()
    assert not card.port_edit.isEnabled()
    ui.events.state(engine("ollama", "stopped", 2))
    assert ui.row("ollama").pending == "Changing port"  # still on the old port
    ui.events.state(engine("ollama", "running", 2, port=11500))
    assert ui.row("ollama").pending is None
    assert card.port_edit.text() == "11500"
    assert not card.port_error.isVisibleTo(card)


async def test_the_same_port_is_not_sent(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running"))
    assert ui.controller.set_port("ollama", "11435")
    await settle()
    assert ui.calls(methods.ENGINE_SET_PORT) == []  # the broker would restart the engine


# -- other nodes -------------------------------------------------------------------------------


async def test_other_nodes_are_read_only(qtbot: QtBot, ui: Ui) -> None:
    await ui.ready(engine("ollama"), nodes=[myself(), peer(ollama=["llama3", "qwen"])])
    await wait_until(lambda: ui.page.card(PEER, "ollama") is not None)
    assert ui.model.get((SELF, "ollama")) is not None
    card = ui.card("ollama", PEER)
    row = ui.row("ollama", PEER)
    assert (row.state, row.door_port, row.models, row.loaded) == (
        "running", 11434, ("llama3", "qwen"), ("llama3",))  # fmt: skip
    assert enabled_buttons(card) == []
    assert not card.port_edit.isVisibleTo(card)
    assert card.read_only.isVisibleTo(card)
    assert card.read_only.text() == "Read-only: not paired with this computer"
    assert not card.log_button.isVisibleTo(card)
    assert "llama3 (loaded)" in card.models.text()
    assert "192.168.1.42:11434" in card.door_port.text()
    # Pushes from discovery update the peer's rows in place, then remove them.
    with qtbot.assertNotEmitted(ui.model.modelReset), qtbot.waitSignal(ui.model.rowsInserted):
        ui.connection.push(methods.DISCOVERY_EVENT, {
            "seq": 4, "event": "node_updated", "node_id": PEER,
            "node": peer(ollama=["llama3"], lmstudio=["gemma"])})  # fmt: skip
    assert enabled_buttons(ui.card("lmstudio", PEER)) == []
    ui.connection.push(methods.DISCOVERY_EVENT, {"seq": 5, "event": "node_telemetry",
                                                 "node_id": PEER})  # fmt: skip
    ui.connection.push(methods.DISCOVERY_EVENT, {"seq": 6, "event": "node_left",
                                                 "node_id": PEER})  # fmt: skip
    assert ui.model.node_rows(PEER) == []
    await settle()
    assert ui.page.card(PEER, "ollama") is None


async def test_a_discovery_gap_subscribes_again(ui: Ui) -> None:
    await ui.ready(engine("ollama"), nodes=[peer(ollama=["a"])])
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 20, "nodes": []})
    ui.connection.push(methods.DISCOVERY_EVENT, {"seq": 9, "event": "node_left", "node_id": "x"})
    await wait_until(lambda: not ui.model.node_rows(PEER))
    assert len(ui.calls(methods.DISCOVERY_SUBSCRIBE)) == 2


async def test_discovery_events_that_overtake_the_snapshot_apply_after_it(ui: Ui) -> None:
    snapshot: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ui.connection.script(methods.STATUS, broker_status())
    ui.events.script(engine("ollama"))
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, snapshot)
    ui.connection.become_ready()
    await wait_until(lambda: bool(ui.calls(methods.DISCOVERY_SUBSCRIBE)))
    ui.connection.push(
        methods.DISCOVERY_EVENT,
        {"seq": 3, "event": "node_joined", "node_id": PEER, "node": peer(ollama=["old"])},
    )
    ui.connection.push(
        methods.DISCOVERY_EVENT,
        {"seq": 4, "event": "node_updated", "node_id": PEER, "node": peer(ollama=["new"])},
    )
    snapshot.set_result({"seq": 3, "nodes": [myself(), peer(ollama=["old"])]})
    await wait_until(lambda: ui.model.get((PEER, "ollama")) is not None)
    await settle()
    assert ui.row("ollama", PEER).models == ("new",)  # event 3 skipped, event 4 applied
    assert ui.model.node_rows(SELF) == [ui.row("ollama")]  # the self entry is not a peer


async def test_an_engine_only_computer_is_read_only_because_it_is_not_pair(ui: Ui) -> None:
    lan = {**peer(ollama=["phi3"]), "kind": "engine", "ports": {"ollama": 11434}}
    await ui.ready(engine("ollama"), nodes=[myself(), lan])
    await wait_until(lambda: ui.page.card(PEER, "ollama") is not None)
    card = ui.card("ollama", PEER)
    assert card.read_only.text() == "Read-only: not a PAIR computer"
    assert enabled_buttons(card) == []
    assert any("not a PAIR computer" in header.note.text() for header in headers(ui))


async def test_an_unreachable_peer_says_so(ui: Ui) -> None:
    await ui.ready(engine("ollama"), nodes=[peer(reachable=False, ollama=["a"])])
    await wait_until(lambda: ui.page.card(PEER, "ollama") is not None)
    assert ui.card("ollama", PEER).state_label.text() == "Unreachable"


# -- other members -----------------------------------------------------------------------------

MEMBER = "member-node"


def member(
    *engines: dict[str, Any], reachable: bool = True, name: str = "laptop", **extra: Any
) -> dict[str, Any]:
    """Another member's ``MemberEngines`` as its link last told this node."""
    return {"node_id": MEMBER, "name": name, "reachable": reachable, "engines": list(engines),
            **extra}  # fmt: skip


def member_node(**extra: Any) -> dict[str, Any]:
    """The member as discovery lists it (its front doors and address)."""
    return {
        "node_id": MEMBER, "name": "laptop", "kind": "pair", "sources": ["manual"],
        "addresses": ["10.0.0.7"], "reachable": True,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "engines": {"ollama": {"models": ["inventory-only"]}}, **extra,
    }  # fmt: skip


async def ready_with_member(ui: Ui, *statuses: dict[str, Any], **fields: Any) -> None:
    ui.connection.script(methods.STATUS, broker_status())
    ui.events.script(engine("ollama", "not-installed"), members=[member(*statuses, **fields)])
    ui.connection.script(
        methods.DISCOVERY_SUBSCRIBE, {"seq": 3, "nodes": [myself(), member_node()]}
    )
    ui.connection.become_ready()
    await wait_until(lambda: len(ui.model.node_rows(MEMBER)) == len(statuses))
    await wait_until(lambda: bool(ui.calls(methods.DISCOVERY_SUBSCRIBE)))
    await settle()


async def test_a_members_engines_have_the_same_controls_and_send_its_node(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await ready_with_member(ui, engine("ollama", "stopped", 3), engine("lmstudio", "running", 2))
    qtmodeltester.check(ui.model, force_py=True)
    card = ui.card("ollama", MEMBER)
    row = ui.row("ollama", MEMBER)
    assert (row.member, row.read_only, row.node_name, row.door_port) == (
        True, False, "laptop", 11434)  # fmt: skip
    assert (
        ui.model.data(ui.model.index(ui.model.position(row.key) or 0, 0), READ_ONLY_ROLE) is False
    )
    assert "10.0.0.7:11434" in card.door_port.text()
    assert not card.read_only.isVisibleTo(card)
    assert not card.models.isVisibleTo(card)  # its models are on the Models page, as here
    assert card.switch.isEnabled() and card.port_edit.isEnabled()
    assert "laptop" in card.port_edit.toolTip()
    assert header(ui, "laptop").note.text() == "10.0.0.7 · paired"
    ui.connection.script(methods.ENGINE_START, never(ui))
    card.switch.click()
    assert ui.store.action(PendingKey(MEMBER, "ollama")) == "Starting"
    assert ui.store.action(PendingKey(SELF, "ollama")) is None  # keyed by node
    assert card.state_label.text() == "Starting…"
    await settle()
    assert ui.calls(methods.ENGINE_START) == [{"engine": "ollama", "node": MEMBER}]
    # This computer's engine of the same name changing does not settle the member's.
    ui.events.state(engine("ollama", "running", 9))
    assert ui.row("ollama", MEMBER).pending == "Starting"
    ui.events.member(member(engine("ollama", "starting", 4), engine("lmstudio", "running", 2)))
    assert ui.row("ollama", MEMBER).pending == "Starting"  # not the outcome yet
    ui.events.member(member(engine("ollama", "running", 5), engine("lmstudio", "running", 2)))
    assert ui.store.get(PendingKey(MEMBER, "ollama")) is None
    assert card.state_label.text() == "Running"
    assert card.restart_button.isEnabled()
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    ui.card("lmstudio", MEMBER).restart_button.click()
    await settle()
    assert ui.calls(methods.ENGINE_RESTART) == [{"engine": "lmstudio", "node": MEMBER}]
    qtmodeltester.check(ui.model, force_py=True)


async def test_a_members_error_and_timeout_clear_its_pending_action(quick_ui: Ui) -> None:
    ui = quick_ui
    await ready_with_member(ui, engine("ollama", "running", 3))
    refused = Conflict("Ollama on port 11435 was not started by PAIR, so PAIR will not stop it")
    ui.connection.script(methods.ENGINE_STOP, refused)
    card = ui.card("ollama", MEMBER)
    card.switch.click()
    await wait_until(lambda: ui.row("ollama", MEMBER).pending is None, timeout=5)
    assert card.notice.text() == f"Could not stop: {refused.message}"
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    card.restart_button.click()
    assert ui.row("ollama", MEMBER).pending == "Restarting"
    await wait_until(lambda: ui.row("ollama", MEMBER).pending is None, timeout=5)
    assert "did not confirm in time" in card.notice.text()


async def test_a_members_port_and_logs_go_to_that_member(ui: Ui) -> None:
    await ready_with_member(ui, engine("ollama", "stopped", 3))
    ui.connection.script(methods.ENGINE_SET_PORT, never(ui))
    card = ui.card("ollama", MEMBER)
    card.port_edit.setText("11600")
    card.apply_port_button.click()
    assert card.state_label.text() == "Changing port…"
    await settle()
    assert ui.calls(methods.ENGINE_SET_PORT) == [
        {"engine": "ollama", "port": 11600, "node": MEMBER}
    ]
    ui.events.member(member(engine("ollama", "stopped", 4, port=11600)))
    assert ui.row("ollama", MEMBER).pending is None
    ui.connection.script(methods.ENGINE_LOGS, {"engine": "ollama", "lines": ["far away"]})
    card.log_button.click()
    await wait_until(lambda: card.log_view.text.toPlainText() == "far away")
    assert ui.calls(methods.ENGINE_LOGS) == [{"engine": "ollama", "lines": 500, "node": MEMBER}]
    assert ui.card("ollama").log_view.text.toPlainText() == ""  # not this computer's card


async def test_an_unreachable_members_cards_are_disabled_and_say_so(ui: Ui) -> None:
    await ready_with_member(ui, engine("ollama", "running", 3), engine("lmstudio", "stopped", 1))
    ui.connection.script(methods.ENGINE_STOP, never(ui))
    ui.card("ollama", MEMBER).switch.click()
    assert ui.row("ollama", MEMBER).pending == "Stopping"
    ui.events.member(
        member(engine("ollama", "running", 3), engine("lmstudio", "stopped", 1),
               reachable=False, error="connection refused"),
    )  # fmt: skip
    assert ui.store.get(PendingKey(MEMBER, "ollama")) is None  # it cannot be confirmed now
    await settle()
    for name in ("ollama", "lmstudio"):
        card = ui.card(name, MEMBER)
        assert enabled_buttons(card) == []
        assert not card.port_edit.isEnabled()
        assert card.read_only.isVisibleTo(card)
        assert card.read_only.text() == "laptop cannot be reached"
        assert not card.notice.isVisibleTo(card)  # not an error per card
    assert ui.card("ollama", MEMBER).state_label.text() == "Running (last known)"
    note = header(ui, "laptop").note.text()
    assert note.startswith("Cannot be reached (connection refused).")
    await settle()
    assert ui.calls(methods.ENGINE_STOP) == [{"engine": "ollama", "node": MEMBER}]
    ui.controller.restart("ollama", MEMBER)
    assert ui.calls(methods.ENGINE_RESTART) == []  # nothing is sent to a member away
    ui.events.member(member(engine("ollama", "running", 3), engine("lmstudio", "stopped", 1)))
    assert ui.card("ollama", MEMBER).switch.isEnabled()
    assert not ui.card("ollama", MEMBER).read_only.isVisibleTo(ui.card("ollama", MEMBER))


async def test_a_member_not_heard_from_yet_shows_its_name_and_why(ui: Ui) -> None:
    await ready_with_member(ui, reachable=False, error="no address answered")
    assert ui.model.node_rows(MEMBER) == []
    note = header(ui, "laptop").note.text()
    assert note.startswith("Cannot be reached (no address answered).")
    assert "once it answers" in note
    assert not ui.page.no_others.isVisibleTo(ui.page)
    with_engines = member(engine("llamacpp", "stopped", 1))
    ui.events.member(with_engines)
    await wait_until(lambda: ui.page.card(MEMBER, "llamacpp") is not None)
    assert header(ui, "laptop").note.text() == "10.0.0.7 · paired"


async def test_install_on_a_member_shows_progress_from_its_installs(ui: Ui) -> None:
    await ready_with_member(ui, engine("llamacpp", "not-installed", 1))
    ui.connection.script(methods.ENGINE_INSTALL, never(ui))
    card = ui.card("llamacpp", MEMBER)
    assert card.install_button.isEnabled()
    assert "Not found on laptop" in card.details.text()
    card.install_button.click()
    assert card.state_label.text() == "Installing…"
    assert card.progress.isVisibleTo(card)
    await settle()
    assert ui.calls(methods.ENGINE_INSTALL) == [{"engine": "llamacpp", "node": MEMBER}]
    step = {"engine": "llamacpp", "stage": "downloading", "percent": 42.0}
    ui.events.member(member(engine("llamacpp", "not-installed", 1), installs=[step]))
    assert card.progress.value() == 42
    assert "downloading" in card.progress.format()
    ui.events.install({**step, "percent": 90.0})  # this computer's install: not the member's
    assert card.progress.value() == 42
    done = {**step, "stage": "installed", "percent": 100.0, "done": True}
    ui.events.member(member(engine("llamacpp", "not-installed", 1), installs=[done]))
    assert ui.row("llamacpp", MEMBER).pending is None
    assert not card.progress.isVisibleTo(card)
    ui.events.member(member(engine("llamacpp", "stopped", 2)))
    assert card.switch.isVisibleTo(card) and card.switch.isEnabled()


async def test_a_failed_install_on_a_member_shows_its_error(ui: Ui) -> None:
    await ready_with_member(ui, engine("llamacpp", "not-installed", 1))
    ui.connection.script(methods.ENGINE_INSTALL, never(ui))
    ui.controller.install("llamacpp", MEMBER)
    failed = {"engine": "llamacpp", "stage": "error", "done": True, "error": "offline"}
    ui.events.member(member(engine("llamacpp", "not-installed", 1), installs=[failed]))
    assert ui.row("llamacpp", MEMBER).pending is None
    assert ui.card("llamacpp", MEMBER).notice.text() == "Install failed: offline"


async def test_update_is_offered_when_versions_says_so_and_runs_on_the_member(ui: Ui) -> None:
    versions = {"engine": "ollama", "installed": "0.5.1", "latest": "0.6.0",
                "update_available": True, "can_update": True}  # fmt: skip
    ui.connection.script(methods.ENGINE_VERSIONS, versions)
    await ready_with_member(ui, engine("ollama", "running", 3))
    card = ui.card("ollama", MEMBER)
    await wait_until(lambda: card.update_button.isVisibleTo(card))
    assert ui.calls(methods.ENGINE_VERSIONS) == [{"engine": "ollama", "node": MEMBER}]
    assert card.update_button.text() == "Update to 0.6.0"
    assert "version 0.5.1" in card.details.text()
    ui.connection.script(methods.ENGINE_UPDATE, never(ui))
    card.update_button.click()
    assert card.state_label.text() == "Updating…"
    assert not card.update_button.isEnabled() and not card.switch.isEnabled()
    await settle()
    assert ui.calls(methods.ENGINE_UPDATE) == [{"engine": "ollama", "node": MEMBER}]
    step = {"engine": "ollama", "stage": "downloading", "percent": 10.0}
    ui.events.member(member(engine("ollama", "stopping", 4), installs=[step]))
    assert card.progress.isVisibleTo(card) and card.progress.value() == 10
    ui.events.member(member(engine("ollama", "running", 6), installs=[step]))
    assert ui.row("ollama", MEMBER).pending == "Updating"  # running again is not the end
    ui.connection.script(methods.ENGINE_VERSIONS, {**versions, "installed": "0.6.0",
                                                   "update_available": False})  # fmt: skip
    done = {**step, "stage": "updated", "percent": 100.0, "done": True}
    ui.events.member(member(engine("ollama", "running", 6), installs=[done]))
    assert ui.row("ollama", MEMBER).pending is None
    await wait_until(lambda: not card.update_button.isVisibleTo(card))  # read again
    assert "version 0.6.0" in card.details.text()


async def test_an_update_pair_cannot_install_says_why(ui: Ui) -> None:
    ui.connection.script(methods.ENGINE_VERSIONS, {
        "engine": "ollama", "installed": "0.5.1", "latest": "0.6.0", "update_available": True,
        "can_update": False, "reason": "installed outside PAIR"})  # fmt: skip
    await ready_with_member(ui, engine("ollama", "running", 3))
    card = ui.card("ollama", MEMBER)
    await wait_until(lambda: card.update_note.isVisibleTo(card))
    assert card.update_note.text() == "Version 0.6.0 is available; installed outside PAIR"
    assert not card.update_button.isVisibleTo(card)


async def test_a_member_that_leaves_goes_back_to_what_discovery_reports(ui: Ui) -> None:
    await ready_with_member(ui, engine("ollama", "running", 3))
    ui.connection.script(methods.ENGINE_STOP, never(ui))
    ui.card("ollama", MEMBER).switch.click()
    ui.events.member_left(MEMBER)
    assert ui.store.get(PendingKey(MEMBER, "ollama")) is None
    await settle()
    row = ui.row("ollama", MEMBER)
    assert row.read_only and row.models == ("inventory-only",)  # discovery's view
    assert ui.card("ollama", MEMBER).read_only.text() == "Read-only: not paired with this computer"
    assert [h.title.text() for h in headers(ui)] == ["<b>This computer</b>", "<b>laptop</b>"]


async def test_disconnect_clears_a_members_pending_actions(ui: Ui) -> None:
    await ready_with_member(ui, engine("ollama", "running", 3))
    ui.connection.script(methods.ENGINE_RESTART, never(ui))
    ui.card("ollama", MEMBER).restart_button.click()
    assert len(ui.store) == 1
    ui.connection.lose_session()
    assert len(ui.store) == 0
    await settle()
    assert ui.page.cards == {}
    assert ui.page.headers == []


# -- logs --------------------------------------------------------------------------------------


async def test_logs_show_read_only_and_refresh(ui: Ui) -> None:
    await ui.ready(engine("ollama", "running"))
    ui.connection.script(methods.ENGINE_LOGS, {"engine": "ollama", "lines": ["one", "two"]})
    card = ui.card("ollama")
    card.log_button.click()
    view = card.log_view
    await wait_until(lambda: view.text.toPlainText() == "one\ntwo")
    assert view.isVisibleTo(card)
    assert view.text.isReadOnly()
    assert digits_line_up(view.text.font())
    assert ui.calls(methods.ENGINE_LOGS) == [{"engine": "ollama", "lines": 500}]
    ui.connection.script(methods.ENGINE_LOGS, InternalError("no such engine"))
    view.refresh_button.click()
    await wait_until(lambda: "no such engine" in view.status.text())
    assert view.text.toPlainText() == "one\ntwo"  # the last good lines stay
    card.log_button.click()
    assert not view.isVisibleTo(card)


# -- pure decisions ----------------------------------------------------------------------------


def _status(state: str, revision: int, port: int = 11435, installed: bool = True) -> EngineStatus:
    return EngineStatus(
        engine="ollama", display_name="Ollama", front_door="ollama", mode="process",
        installed=installed, state=state, port=port, default_port=11435,  # type: ignore[arg-type]
        revision=revision,
    )  # fmt: skip


def test_what_confirms_a_command() -> None:
    start = Expectation(EngineCommand.START, baseline=4)
    assert not confirms(start, _status("running", 4))  # from before the click
    assert not confirms(start, _status("starting", 5))
    assert confirms(start, _status("running", 5))
    assert confirms(start, _status("error", 5))
    stop = Expectation(EngineCommand.STOP, baseline=1)
    assert confirms(stop, _status("stopped", 2))
    assert not confirms(stop, _status("stopping", 2))
    install = Expectation(EngineCommand.INSTALL, baseline=0)
    assert not confirms(install, _status("not-installed", 1, installed=False))
    assert confirms(install, _status("stopped", 1))
    port = Expectation(EngineCommand.SET_PORT, baseline=0, port=9000)
    assert not confirms(port, _status("stopped", 1))
    assert not confirms(port, _status("starting", 1, port=9000))
    assert confirms(port, _status("running", 1, port=9000))


def test_ports_parse_and_doors_read() -> None:
    assert parse_port("1024") == 1024
    assert parse_port(" 65535 ") == 65535
    assert isinstance(parse_port("1023"), str)
    assert isinstance(parse_port("x"), str)
    assert door_ports({"ollama": "http://127.0.0.1:11434", "bad": "http://h:notaport"}) == {
        "ollama": 11434
    }


def test_the_switch_points_at_the_pending_goal() -> None:
    row = EngineRow(node_id="n", node_name="n", engine="e", display_name="E", local=True,
                    state="running", installed=True, door="ollama")  # fmt: skip
    assert switch_on(row)
    assert not switch_on(EngineRow(**{**_fields(row), "pending": "Stopping"}))
    assert switch_on(EngineRow(**{**_fields(row), "state": "stopped", "pending": "Starting"}))


def _fields(row: EngineRow) -> dict[str, Any]:
    return msgspec.structs.asdict(row)


async def test_cards_take_clicks_only_where_allowed(qtbot: QtBot, ui: Ui) -> None:
    await ui.ready(engine("ollama", "running", adopted=True))
    card = ui.card("ollama")
    assert card.state_label.text() == "Running (started outside PAIR)"
    assert not card.switch.isEnabled()  # PAIR never stops what it did not start
    assert not card.restart_button.isEnabled()
    assert not card.port_edit.isEnabled()
    qtbot.mouseClick(card.switch, Qt.MouseButton.LeftButton, pos=QPoint(5, 5))
    await settle()
    assert ui.calls(methods.ENGINE_STOP) == []


async def test_a_member_event_while_no_loop_runs_asks_for_versions_with_the_next(ui: Ui) -> None:
    """Qt may deliver a pushed event while the asyncio loop is stopped (at the app's exit, or
    when Qt's events are processed outside it): nothing can be started then, nothing raises,
    and the next event asks."""
    await ready_with_member(ui, engine("ollama", "not-installed", 1))
    ui.connection.script(methods.ENGINE_VERSIONS, {
        "engine": "ollama", "installed": "0.5.1", "latest": "0.5.1", "update_available": False,
        "can_update": True})  # fmt: skip
    loop = asyncio.get_running_loop()
    asyncio.events._set_running_loop(None)  # as qasync runs a callback outside run_forever
    try:
        ui.events.member(member(engine("ollama", "stopped", 2)))
    finally:
        asyncio.events._set_running_loop(loop)
    await settle()
    assert ui.calls(methods.ENGINE_VERSIONS) == []
    ui.events.member(member(engine("ollama", "running", 3)))
    await wait_until(lambda: bool(ui.calls(methods.ENGINE_VERSIONS)))
    assert ui.calls(methods.ENGINE_VERSIONS) == [{"engine": "ollama", "node": MEMBER}]
