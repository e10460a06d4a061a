"""The Cluster page: the members table built from the cluster, engines and discovery stores,
rename, remove, leave, the empty state, LAN access and its API keys, against a scripted
connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QLabel, QLineEdit, QMessageBox, QPlainTextEdit, QWidget
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.controllers.cluster_page import ClusterPageController, NewKey, client_settings
from app.models.members import (
    ApiKeysModel,
    MembersModel,
    ago,
    engines_summary,
    member_row,
)
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.cluster_dialogs import Prompts
from app.window.cluster_page import ClusterPage, group_fingerprint
from app.window.cluster_parts import remove_text, selected_row
from backend.protocol import methods
from backend.protocol.errors import InvalidParams, Unavailable
from backend.protocol.types.apikeys import ApiKeyInfo
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import ClusterMember
from backend.protocol.types.engines import MemberEngines
from backend.protocol.types.nodes import DiscoveredNode
from tests.fakes import FakeClock
from tests.gui.helpers import NO_MODELS, FakeConnection, emitted, settle, wait_until

NOW = 1_750_000_000.0
SELF = "n-self"
FINGERPRINT = "sha256:" + "0123456789abcdef" * 4
SECRET = "pair-" + "S" * 43


# Raw wire values ------------------------------------------------------------------------------


def member(node_id: str, name: str, state: str = "online", **extra: Any) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "fingerprint": "sha256:" + node_id.ljust(64, "0"),
        "address": "192.168.1.20", "node_port": 14320, "added_by": SELF,
        "added_at": NOW - 3 * 86400, "state": state, **extra,
    }  # fmt: skip


def status(*members: dict[str, Any], cluster: str | None = "c-1", **extra: Any) -> dict[str, Any]:
    return {
        "node_id": SELF, "fingerprint": FINGERPRINT, "key_protection": "keyring",
        "cluster_id": cluster, "cluster_name": "Home lab" if cluster else "",
        "members": list(members), "invites": [], **extra,
    }  # fmt: skip


def engine(name: str, display: str, state: str) -> dict[str, Any]:
    return {
        "engine": name, "display_name": display, "front_door": name, "mode": "process",
        "installed": state != "not-installed", "state": state, "port": 1, "default_port": 1,
    }  # fmt: skip


def member_engines(node_id: str, name: str, *engines: dict[str, Any], **extra: Any) -> Any:
    return {"node_id": node_id, "name": name, "reachable": True, "engines": list(engines), **extra}


def node(node_id: str, name: str, last_seen: float | None, *sources: str) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": list(sources or ["mdns"]),
        "addresses": ["192.168.1.5"], "ports": {}, "engines": {}, "reachable": True,
        "last_seen": last_seen,
    }  # fmt: skip


def api_key(key_id: str, name: str, prefix: str) -> dict[str, Any]:
    return {"id": key_id, "name": name, "prefix": prefix, "created_at": NOW - 86400}


def settings(lan_access: bool) -> dict[str, Any]:
    spec = {"key": "lan_access", "type": "bool", "default": False, "description": "d"}
    return {"values": {"lan_access": lan_access}, "schema": [spec]}


BROKER_STATUS = {
    "version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
    "node_id": SELF, "node_name": "desk", "control_address": "/c", "log_file": None,
    "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
    "components": [], "errors": [],
    "front_doors": {"ollama": "http://127.0.0.1:11434", "openai": "http://127.0.0.1:1235"},
}  # fmt: skip

ATLAS = member("n-atlas", "atlas")
BOX = member("n-box", "gpu-box", added_by="n-atlas")
NAS = member("n-nas", "nas", state="offline")


# Fixtures -------------------------------------------------------------------------------------


@dataclass
class FakePrompts(Prompts):
    """Answers the page's questions from a script and records them."""

    answers: list[bool] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def confirm(self, parent: QWidget, title: str, text: str, action: str) -> bool:
        self.asked.append((title, text, action))
        return self.answers.pop(0)

    def key_name(self, parent: QWidget) -> str | None:
        return self.names.pop(0)


@dataclass
class Ui:
    connection: FakeConnection
    controller: ClusterPageController
    page: ClusterPage
    prompts: FakePrompts
    clock: FakeClock
    seq: int = 1

    def push_status(self, *members: dict[str, Any], **extra: Any) -> None:
        self.seq += 1
        self.connection.push(
            methods.CLUSTER_EVENT,
            {"seq": self.seq, "event": "membership_changed", "status": status(*members, **extra)},
        )

    def names(self) -> list[str]:
        return [row.name for row in self.controller.members.rows()]


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    connection = FakeConnection()
    cluster, engines, discovery = (
        ClusterStore(connection), EnginesStore(connection), DiscoveryStore(connection),
    )  # fmt: skip
    settings = SettingsStore(connection)
    clock = FakeClock(NOW)
    controller = ClusterPageController(
        connection,
        MembersModel(),
        ApiKeysModel(),
        cluster,
        engines,
        discovery,
        settings,
        clock=clock,
        interfaces=lambda: ["fe80::1", "10.0.0.7"],
    )
    prompts = FakePrompts()
    page = ClusterPage(connection, controller, prompts)
    qtbot.addWidget(page)
    page.resize(900, 1000)
    yield Ui(connection, controller, page, prompts, clock)
    for closing in (controller, cluster, engines, discovery, settings):
        await closing.close()
    await connection.stop()


async def start(
    ui: Ui,
    cluster: dict[str, Any],
    *,
    members: list[dict[str, Any]] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    keys: list[dict[str, Any]] | None = None,
    lan_access: bool = False,
) -> None:
    """Script every read of a session, start it and wait until the page shows it."""
    connection = ui.connection
    connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": cluster})
    connection.script(
        methods.ENGINE_SUBSCRIBE,
        {"seq": 1, "engines": [], "models": NO_MODELS, "members": members or []},
    )
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": nodes or []})
    connection.script(methods.SETTINGS_GET, settings(lan_access))
    connection.script(methods.APIKEYS_LIST, keys or [])
    connection.become_ready()
    await wait_until(lambda: ui.controller.status is not None, 5, "the cluster snapshot")
    await wait_until(lambda: ui.controller.lan_access is not None, 5, "the settings")
    await wait_until(lambda: bool(connection.called(methods.APIKEYS_LIST)), 5, "the keys")
    await settle()


def visible_texts(widget: QWidget) -> str:
    """Every text the widget and its children show."""
    parts: list[str] = []
    for child in [widget, *widget.findChildren(QWidget)]:
        if isinstance(child, QLabel | QLineEdit):
            parts.append(child.text())
        elif isinstance(child, QPlainTextEdit):
            parts.append(child.toPlainText())
    return "\n".join(parts)


def table_texts(model: MembersModel | ApiKeysModel) -> list[list[str]]:
    return [
        [model.data(model.index(row, column)) for column in range(model.columnCount())]
        for row in range(model.rowCount())
    ]


# The rows, as pure functions ------------------------------------------------------------------


def wire_member(raw: dict[str, Any]) -> ClusterMember:
    return msgspec.convert(raw, ClusterMember)


def wire_engines(raw: dict[str, Any]) -> MemberEngines:
    return msgspec.convert(raw, MemberEngines)


def test_ago_reads_like_a_person_says_it() -> None:
    assert [ago(s) for s in (-5, 0, 59, 60, 150, 3599, 3600, 86399, 86400 * 3)] == [
        "now", "now", "now", "1 min ago", "2 min ago", "59 min ago", "1 h ago", "23 h ago",
        "3 d ago",
    ]  # fmt: skip


def test_the_engines_column_lists_installed_engines_with_their_state() -> None:
    engines = member_engines(
        "n-a", "a",
        engine("ollama", "Ollama", "running"), engine("lmstudio", "LM Studio", "stopped"),
        engine("llamacpp", "llama.cpp", "not-installed"),
    )  # fmt: skip
    assert engines_summary(wire_engines(engines)) == "Ollama running, LM Studio stopped"
    assert engines_summary(None) == "Not heard yet"
    assert engines_summary(wire_engines(member_engines("n-a", "a"))) == "No engines installed"


def test_a_row_says_unreachable_provisional_last_seen_and_who_added_it() -> None:
    names = {NodeId("n-atlas"): "atlas"}
    error = "gpu-box does not answer at 192.168.1.20:14320"
    down = member_engines("n-box", "gpu-box", engine("ollama", "Ollama", "running"),
                          reachable=False, error=error)  # fmt: skip
    seen = msgspec.convert(node("n-box", "gpu-box", NOW - 130), DiscoveredNode)
    row = member_row(wire_member(BOX), wire_engines(down), seen, self_id=NodeId(SELF),
                     names=names, now=NOW)  # fmt: skip
    assert row.state == "unreachable"
    assert "does not answer" in row.state_tip
    assert row.engines == "Ollama running (last heard)"
    assert row.last_seen == "2 min ago"
    assert row.address == "192.168.1.20:14320"
    assert row.added.endswith("by atlas")
    provisional = member_row(wire_member(member("n-new", "new", "provisional")), None, None,
                             self_id=NodeId(SELF), names={}, now=NOW)  # fmt: skip
    assert (provisional.state, provisional.last_seen) == ("provisional", "—")
    assert provisional.added.endswith("by this computer")
    v6 = member_row(wire_member(member("n-6", "six", address="fe80::1")), None, None,
                    self_id=None, names={}, now=NOW)  # fmt: skip
    assert v6.address == "[fe80::1]:14320"
    assert v6.last_seen == "now"  # online, not yet in the directory: its link is up


def test_models_keep_the_qt_contract(qtmodeltester: ModelTester) -> None:
    members = MembersModel()
    qtmodeltester.check(members, force_py=True)

    def row(raw: dict[str, Any]) -> Any:
        return member_row(wire_member(raw), None, None, self_id=NodeId(SELF), names={}, now=NOW)

    members.reset([row(ATLAS), row(BOX)])
    members.upsert(row(member("n-box", "gpu-box", "offline")))
    members.sync([row(BOX), row(NAS)])
    members.remove(NodeId("n-nas"))
    qtmodeltester.check(members, force_py=True)
    keys = ApiKeysModel()
    keys.reset([msgspec.convert(api_key("k1", "laptop", "pair-AbCd"), ApiKeyInfo)])
    keys.upsert(msgspec.convert(api_key("k2", "phone", "pair-XyZw"), ApiKeyInfo))
    qtmodeltester.check(keys, force_py=True)
    assert table_texts(keys)[1][:2] == ["phone", "pair-XyZw…"]


def test_the_fingerprint_is_grouped_and_the_client_settings_carry_the_secret() -> None:
    line = "0123 4567 89ab cdef 0123 4567 89ab cdef"
    assert group_fingerprint(FINGERPRINT).splitlines() == [line, line]
    info = msgspec.convert(api_key("k1", "laptop", "pair-AbCd"), ApiKeyInfo)
    key = NewKey(info, SECRET, "192.168.1.5", 1235, 11434, lan_access=True)
    text = client_settings(key)
    assert f"OPENAI_API_KEY={SECRET}" in text
    assert "OPENAI_BASE_URL=http://192.168.1.5:1235/v1" in text
    assert SECRET not in repr(key)


# The table follows the stores -----------------------------------------------------------------


async def test_the_table_follows_membership_pushes_row_by_row(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS, BOX))
    model = ui.controller.members
    assert ui.names() == ["atlas", "gpu-box"]
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsInserted):
        ui.push_status(ATLAS, BOX, NAS)
    assert ui.names() == ["atlas", "gpu-box", "nas"]
    assert table_texts(model)[2][1] == "Offline"
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsRemoved):
        ui.push_status(ATLAS, NAS)
    assert ui.names() == ["atlas", "nas"]
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.dataChanged):
        ui.push_status(ATLAS, member("n-nas", "nas", "online"))
    assert table_texts(model)[1][1] == "Online"


async def test_engine_member_pushes_change_state_and_engines_of_one_row(
    qtbot: QtBot, ui: Ui
) -> None:
    running = member_engines("n-box", "gpu-box", engine("ollama", "Ollama", "running"),
                             engine("lmstudio", "LM Studio", "stopped"))  # fmt: skip
    await start(ui, status(ATLAS, BOX), members=[running])
    model = ui.controller.members
    assert table_texts(model)[1][3] == "Ollama running, LM Studio stopped"
    down = {**running, "reachable": False, "error": "gpu-box does not answer"}
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.dataChanged) as sig:
        ui.connection.push(
            methods.ENGINE_EVENT, {"seq": 2, "event": "member_changed", "member": down}
        )
    assert sig.args[0].row() == 1
    assert table_texts(model)[1][1] == "Unreachable"
    assert table_texts(model)[1][3] == "Ollama running, LM Studio stopped (last heard)"
    assert "does not answer" in model.data(model.index(1, 1), Qt.ItemDataRole.ToolTipRole)
    assert table_texts(model)[0][3] == "Not heard yet"


async def test_last_seen_comes_from_discovery_and_moves_on(qtbot: QtBot, ui: Ui) -> None:
    nodes = [node("n-nas", "nas", NOW - 10), node(SELF, "desk", NOW, "self")]
    await start(ui, status(NAS), nodes=nodes)
    model = ui.controller.members
    assert table_texts(model)[0][4] == "now"
    ui.clock.now = NOW + 170
    with qtbot.waitSignal(model.dataChanged):
        ui.controller.refresh()
    assert table_texts(model)[0][4] == "3 min ago"
    with qtbot.assertNotEmitted(model.dataChanged):
        ui.controller.refresh()  # nothing moved on


# Rename ---------------------------------------------------------------------------------------


async def test_rename_saves_on_enter_and_esc_goes_back(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS))
    edit = ui.page.cluster_box.name_edit
    assert edit.text() == "Home lab"
    edit.setText("Garage")
    qtbot.keyClick(edit, Qt.Key.Key_Escape)
    assert edit.text() == "Home lab"
    assert ui.connection.called(methods.CLUSTER_RENAME) == []
    renamed = status(ATLAS) | {"cluster_name": "Garage lab"}
    ui.connection.script(methods.CLUSTER_RENAME, renamed)
    edit.setText("Garage lab")
    await emitted(ui.controller.renamed, lambda: qtbot.keyClick(edit, Qt.Key.Key_Return))
    assert ui.connection.called(methods.CLUSTER_RENAME) == [{"name": "Garage lab"}]
    assert edit.text() == "Garage lab" and edit.saved == "Garage lab"
    assert not edit.isReadOnly()
    assert ui.page.cluster_box.name_error.isHidden()


async def test_a_refused_name_shows_the_brokers_reason(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS))
    edit = ui.page.cluster_box.name_edit
    reason = "a cluster name is 1-64 printable characters"
    ui.connection.script(methods.CLUSTER_RENAME, InvalidParams(reason))
    edit.setText("   ")
    await emitted(ui.controller.rename_failed, lambda: qtbot.keyClick(edit, Qt.Key.Key_Return))
    error = ui.page.cluster_box.name_error
    assert not error.isHidden()
    assert error.text() == f"Not saved: {reason}."
    assert edit.text() == "   " and not edit.isReadOnly()  # kept, to fix or Esc
    qtbot.keyClick(edit, Qt.Key.Key_Escape)
    assert edit.text() == "Home lab"


async def test_a_rename_from_another_member_shows_unless_one_is_being_typed(ui: Ui) -> None:
    await start(ui, status(ATLAS))
    edit = ui.page.cluster_box.name_edit
    ui.push_status(ATLAS, cluster_name="Upstairs")
    await wait_until(lambda: edit.text() == "Upstairs", 5)
    edit.setText("Mine")
    ui.push_status(ATLAS, cluster_name="Downstairs")
    await wait_until(lambda: edit.saved == "Downstairs", 5)
    assert edit.text() == "Mine"


# Remove and leave -----------------------------------------------------------------------------


def select(ui: Ui, table_row: int, keys: bool = False) -> None:
    table = ui.page.lan_box.table if keys else ui.page.cluster_box.table
    table.selectRow(table_row)


async def test_remove_asks_first_and_a_cancel_sends_nothing(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS, BOX))
    box = ui.page.cluster_box
    assert not box.remove_button.isEnabled()
    select(ui, 1)
    assert box.remove_button.isEnabled()
    ui.prompts.answers = [False]
    box.remove_button.click()
    await settle()
    assert ui.connection.called(methods.CLUSTER_REMOVE) == []
    title, text, action = ui.prompts.asked[0]
    assert title == "Remove gpu-box?" and action == "Remove"
    assert text == remove_text("gpu-box")
    assert text.startswith("gpu-box is removed for good: this cluster never accepts its current")


async def test_remove_confirmed_calls_the_broker_and_the_row_goes(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS, BOX))
    box = ui.page.cluster_box
    removed = {"node_id": "n-box", "name": "gpu-box", "fingerprint": "f", "removed_at": NOW}
    ui.connection.script(methods.CLUSTER_REMOVE, removed)
    select(ui, 1)
    ui.prompts.answers = [True]
    await emitted(ui.controller.membership_done, box.remove_button.click)
    assert ui.connection.called(methods.CLUSTER_REMOVE) == [{"node_id": "n-box"}]
    assert "gpu-box was removed for good" in box.notice.text()
    ui.push_status(ATLAS)
    await wait_until(lambda: ui.names() == ["atlas"], 5)


async def test_leave_says_what_happens_then_leaves(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS, NAS))
    box = ui.page.cluster_box
    left = {"cluster_id": "c-1", "told": ["n-atlas"], "not_told": ["n-nas"]}
    ui.connection.script(methods.CLUSTER_LEAVE, left)
    ui.prompts.answers = [True]
    await emitted(ui.controller.membership_done, box.leave_button.click)
    title, text, action = ui.prompts.asked[0]
    assert (title, action) == ("Leave Home lab?", "Leave cluster")
    assert "forgets the certificates it pinned" in text and "new invite" in text
    assert ui.connection.called(methods.CLUSTER_LEAVE) == [None]
    assert "left Home lab" in box.notice.text() and "Not reached in time: nas" in box.notice.text()
    ui.push_status(cluster=None)
    await wait_until(lambda: box.empty.isVisibleTo(ui.page), 5)
    assert not box.notice.isHidden()  # the outcome stays readable in the empty state


async def test_leave_cancelled_sends_nothing(ui: Ui) -> None:
    await start(ui, status(ATLAS))
    ui.prompts.answers = [False]
    ui.page.cluster_box.leave_button.click()
    await settle()
    assert ui.connection.called(methods.CLUSTER_LEAVE) == []


# The empty state ------------------------------------------------------------------------------


async def test_not_in_a_cluster_shows_the_way_in(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(cluster=None))
    ui.page.show()
    box = ui.page.cluster_box
    assert box.empty.isVisible() and not box.cluster_part.isVisible()
    assert box.empty.headline.text() == "Not in a cluster yet"
    assert "Add node… to invite another computer" in box.empty.message.text()
    assert ui.page.identity_box.isVisible()  # the fingerprint is shown anyway
    assert "0123 4567" in ui.page.identity_box.fingerprint.text()
    ui.page.identity_box.copy_button.click()
    assert QGuiApplication.clipboard().text() == FINGERPRINT
    with qtbot.waitSignal(ui.page.add_node_requested):
        box.empty.add_button.click()


async def test_join_a_cluster_opens_the_window_and_shows_the_time_left(
    qtbot: QtBot, ui: Ui
) -> None:
    await start(ui, status(cluster=None))
    ui.page.show()
    row = ui.page.cluster_box.join_row
    assert row.join_button.isVisible() and not row.stop_button.isVisible()
    window = {"opened_at": NOW, "closes_at": NOW + 600}
    ui.connection.script(methods.CLUSTER_OPEN_JOIN_WINDOW, {"window": window})
    row.join_button.click()
    await wait_until(lambda: bool(ui.connection.called(methods.CLUSTER_OPEN_JOIN_WINDOW)), 5)
    assert ui.connection.called(methods.CLUSTER_OPEN_JOIN_WINDOW) == [{"minutes": 10.0}]
    ui.push_status(cluster=None, join_window=window)  # the broker says it opened
    await wait_until(lambda: row.stop_button.isVisible(), 5, "the open window")
    assert not row.join_button.isVisible()
    assert "accepts invites for 10:00 more" in row.state.text()
    assert "Add node…" in row.state.text()
    ui.clock.now += 61
    await wait_until(lambda: "8:59 more" in row.state.text(), 5, "the time left moving on")
    ui.connection.script(methods.CLUSTER_CLOSE_JOIN_WINDOW, {})
    row.stop_button.click()
    await wait_until(lambda: bool(ui.connection.called(methods.CLUSTER_CLOSE_JOIN_WINDOW)), 5)
    ui.push_status(cluster=None)  # closed: the way in again
    await wait_until(lambda: row.join_button.isVisible(), 5, "the closed window")
    assert not row.stop_button.isVisible()


async def test_a_removed_computer_is_told_who_removed_it(ui: Ui) -> None:
    removed = {"cluster_id": "c-0", "cluster_name": "Old lab", "by": "n-x", "by_name": "atlas",
               "at": NOW - 86400}  # fmt: skip
    await start(ui, status(cluster=None, removed=removed))
    note = ui.page.cluster_box.empty.removed_note
    assert not note.isHidden()
    assert note.text().startswith("atlas removed this computer from Old lab on ")


async def test_add_node_in_a_cluster_only_asks_for_the_dialog(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS))
    with qtbot.waitSignal(ui.page.add_node_requested):
        ui.page.cluster_box.add_button.click()
    assert [name for name, _ in ui.connection.calls if name.startswith("cluster:")] == [
        "cluster:subscribe"
    ]


async def test_nothing_can_be_changed_while_disconnected(ui: Ui) -> None:
    await start(ui, status(ATLAS), keys=[api_key("k1", "laptop", "pair-AbCd")])
    ui.connection.lose_session()
    await settle()
    page = ui.page
    assert not page.connection_note.isHidden()
    assert page.cluster_box.isHidden() and page.lan_box.isHidden()
    assert not page.lan_box.switch.isEnabled()
    assert not page.lan_box.create_button.isEnabled()
    assert ui.controller.keys.rowCount() == 0


# LAN access and keys --------------------------------------------------------------------------


async def test_the_lan_switch_saves_the_setting_and_follows_pushes(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS), lan_access=False)
    switch = ui.page.lan_box.switch
    assert switch.isEnabled() and not switch.isChecked()
    ui.connection.script(methods.SETTINGS_SET, settings(True))
    await emitted(ui.controller.changed, switch.click)
    assert ui.connection.called(methods.SETTINGS_SET) == [{"values": {"lan_access": True}}]
    assert switch.isChecked()
    ui.connection.push(methods.SETTINGS_CHANGED, settings(False))
    await wait_until(lambda: not switch.isChecked(), 5)
    assert len(ui.connection.called(methods.SETTINGS_SET)) == 1  # a push is not saved back


async def test_a_refused_lan_switch_goes_back_and_says_why(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS), lan_access=False)
    switch = ui.page.lan_box.switch
    ui.connection.script(methods.SETTINGS_SET, InvalidParams("settings are read-only here"))
    await emitted(ui.controller.lan_access_failed, switch.click)
    await settle()
    assert not switch.isChecked()
    assert "settings are read-only here" in ui.page.lan_box.switch_error.text()


async def test_a_new_keys_secret_is_shown_once(qtbot: QtBot, ui: Ui) -> None:
    nodes = [node(SELF, "desk", NOW, "self") | {"addresses": ["127.0.0.1", "192.168.1.5"]}]
    await start(ui, status(ATLAS), nodes=nodes, lan_access=True)
    box = ui.page.lan_box
    ui.prompts.names = ["laptop"]
    ui.connection.script(methods.STATUS, BROKER_STATUS)
    created = {"key": api_key("k1", "laptop", "pair-SSSS"), "secret": SECRET}
    ui.connection.script(methods.APIKEYS_CREATE, created)
    await emitted(ui.controller.key_created, box.create_button.click)
    assert ui.connection.called(methods.APIKEYS_CREATE) == [{"name": "laptop"}]
    dialog = box.secret_dialog
    assert dialog is not None and dialog.isVisible()
    shown = visible_texts(dialog)
    assert SECRET in shown and "cannot be shown again" in shown
    assert f"OPENAI_API_KEY={SECRET}" in shown
    assert "OPENAI_BASE_URL=http://192.168.1.5:1235/v1" in shown  # the moved front door
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == SECRET
    assert [row[:2] for row in table_texts(ui.controller.keys)] == [["laptop", "pair-SSSS…"]]
    dialog.close()
    await settle()
    assert box.secret_dialog is None
    # The list opened again (the page shown again) has the prefix only.
    ui.connection.script(methods.APIKEYS_LIST, [api_key("k1", "laptop", "pair-SSSS")])
    ui.page.hide()
    ui.page.show()
    await wait_until(lambda: len(ui.connection.called(methods.APIKEYS_LIST)) == 2, 5)
    await settle()
    assert SECRET not in visible_texts(ui.page)
    assert table_texts(ui.controller.keys)[0][:2] == ["laptop", "pair-SSSS…"]


async def test_a_refused_key_name_is_said(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS))
    ui.prompts.names = ["x" * 80]
    ui.connection.script(methods.STATUS, BROKER_STATUS)
    ui.connection.script(methods.APIKEYS_CREATE, InvalidParams("a key name is 1-64 characters"))
    await emitted(ui.controller.keys_failed, ui.page.lan_box.create_button.click)
    assert ui.page.lan_box.notice.text() == "Not created: a key name is 1-64 characters."
    assert ui.page.lan_box.secret_dialog is None


async def test_creating_a_key_cancelled_sends_nothing(ui: Ui) -> None:
    await start(ui, status(ATLAS))
    ui.prompts.names = [None]
    ui.page.lan_box.create_button.click()
    await settle()
    assert ui.connection.called(methods.APIKEYS_CREATE) == []


async def test_revoke_asks_first_then_the_key_goes(qtbot: QtBot, ui: Ui) -> None:
    keys = [api_key("k1", "laptop", "pair-AbCd"), api_key("k2", "phone", "pair-XyZw")]
    await start(ui, status(ATLAS), keys=keys)
    box = ui.page.lan_box
    assert not box.revoke_button.isEnabled()
    select(ui, 1, keys=True)
    ui.prompts.answers = [False, True]
    box.revoke_button.click()
    await settle()
    assert ui.connection.called(methods.APIKEYS_REVOKE) == []
    assert "phone (pair-XyZw…) is refused from now on" in ui.prompts.asked[0][1]
    ui.connection.script(methods.APIKEYS_REVOKE, keys[1])
    await emitted(ui.controller.key_revoked, box.revoke_button.click)
    assert ui.connection.called(methods.APIKEYS_REVOKE) == [{"id": "k2"}]
    assert [row.name for row in ui.controller.keys.rows()] == ["laptop"]
    assert "Revoked the key phone" in box.notice.text()


# The real confirmation box --------------------------------------------------------------------


@pytest.fixture
def parent(qtbot: QtBot) -> QWidget:
    widget = QWidget()
    qtbot.addWidget(widget)
    return widget


@pytest.mark.parametrize("press_action", [True, False])
def test_the_confirmation_box_is_true_only_for_its_action(
    parent: QWidget, press_action: bool
) -> None:
    def answer() -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)
        assert box.text() == "what happens"
        wanted = "Remove" if press_action else "Cancel"
        button = next(b for b in box.buttons() if b.text().replace("&", "") == wanted)
        button.click()

    QTimer.singleShot(0, answer)
    assert Prompts().confirm(parent, "Remove it?", "what happens", "Remove") is press_action


async def test_a_cluster_that_cannot_be_read_says_why_and_tries_again(ui: Ui) -> None:
    connection = ui.connection
    connection.script(
        methods.CLUSTER_SUBSCRIBE, Unavailable("the cluster component is not running")
    )
    connection.script(methods.SETTINGS_GET, settings(False))
    connection.script(methods.APIKEYS_LIST, [])
    connection.become_ready()
    page = ui.page
    await wait_until(lambda: not page.problem.isHidden(), 5, "the problem")
    assert "the cluster component is not running" in page.problem.text()
    assert page.cluster_box.isHidden() and page.loading.isHidden()
    connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": status(ATLAS)})
    connection.script(methods.APIKEYS_LIST, [])
    page.retry_button.click()
    await wait_until(lambda: ui.controller.status is not None, 5, "the snapshot")
    await settle()
    assert page.problem.isHidden() and not page.cluster_box.isHidden()
    assert ui.names() == ["atlas"]


async def test_after_a_removal_nothing_is_selected_and_the_outcome_follows_the_member(
    qtbot: QtBot, ui: Ui
) -> None:
    await start(ui, status(ATLAS, BOX, NAS))
    box = ui.page.cluster_box
    removed = {"node_id": "n-box", "name": "gpu-box", "fingerprint": "f", "removed_at": NOW}
    ui.connection.script(methods.CLUSTER_REMOVE, removed)
    select(ui, ui.names().index("gpu-box"))
    ui.prompts.answers = [True]
    await emitted(ui.controller.membership_done, box.remove_button.click)
    assert box.notice.text() == "gpu-box was removed for good; it is being told to leave."
    ui.push_status(ATLAS, NAS)
    await wait_until(lambda: "gpu-box" not in ui.names(), 5)
    await settle()
    # The next member is not selected in its place, ready for a second Remove.
    assert selected_row(box.table) is None and not box.remove_button.isEnabled()
    assert box.notice.text() == "gpu-box is no longer in the cluster."


async def test_the_outcome_line_keeps_its_room_so_nothing_below_moves(qtbot: QtBot, ui: Ui) -> None:
    await start(ui, status(ATLAS, BOX))
    ui.page.resize(820, 1200)
    ui.page.show()
    await settle()
    create = ui.page.lan_box.create_button
    before = create.mapTo(ui.page, create.rect().topLeft())
    ui.page.cluster_box.notice.say("gpu-box was removed for good; it is being told to leave.")
    await settle()
    ui.page.widget().layout().activate()
    assert create.mapTo(ui.page, create.rect().topLeft()) == before
    ui.page.cluster_box.notice.say("")
    await settle()
    ui.page.widget().layout().activate()
    assert create.mapTo(ui.page, create.rect().topLeft()) == before


def test_the_removal_says_how_to_bring_that_computer_back() -> None:
    text = remove_text("vm")
    assert "reset" in text.lower() and "invite it again" in text


def test_the_key_settings_name_every_door_the_llamacpp_one_included() -> None:
    info = msgspec.convert(api_key("k1", "laptop", "pair-AbCd"), ApiKeyInfo)
    key = NewKey(info, SECRET, "fd00::5", 1235, 11434, lan_access=True, llamacpp_port=8080)
    lines = client_settings(key).splitlines()
    assert "# OPENAI_BASE_URL=http://[fd00::5]:8080/v1" in lines
    assert "ANTHROPIC_BASE_URL=http://[fd00::5]:11434" in lines
    assert f"ANTHROPIC_API_KEY={SECRET}" in lines


async def test_without_an_advertised_address_the_key_names_an_interfaces_one(
    qtbot: QtBot, ui: Ui
) -> None:
    # As in the demo: discovery knows this computer only at 127.0.0.1.
    nodes = [node(SELF, "desk", NOW, "self") | {"addresses": ["127.0.0.1"]}]
    await start(ui, status(ATLAS), nodes=nodes, lan_access=True)
    ui.prompts.names = ["laptop"]
    ui.connection.script(methods.STATUS, BROKER_STATUS)
    created = {"key": api_key("k1", "laptop", "pair-SSSS"), "secret": SECRET}
    ui.connection.script(methods.APIKEYS_CREATE, created)
    await emitted(ui.controller.key_created, ui.page.lan_box.create_button.click)
    dialog = ui.page.lan_box.secret_dialog
    assert dialog is not None
    shown = visible_texts(dialog)
    assert "OPENAI_BASE_URL=http://10.0.0.7:1235/v1" in shown
    assert "# OPENAI_BASE_URL=http://10.0.0.7:8080/v1" in shown  # the llama.cpp door
    assert "<this computer's address>" not in shown
    dialog.close()
    await settle()
