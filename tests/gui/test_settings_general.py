"""Settings → General: start at login, minimise to tray, front-door timeouts and pinned node,
llama.cpp's requests at once and context size."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.autostart import FileAutostart, xdg_autostart
from app.controllers.endpoints import (
    FIRST_CONTENT_TIMEOUT,
    HEADER_TIMEOUT,
    LLAMACPP_CONTEXT,
    LLAMACPP_PARALLEL,
    PINNED_NODE,
    PLACEMENT,
    FrontDoorSettingsController,
    check_value,
    pinned_node_choices,
)
from app.stores.settings import SettingsStore
from app.window.settings_general import MINIMISE_TO_TRAY_KEY, GeneralSettings, minimise_to_tray
from backend.protocol import methods
from backend.protocol.errors import InvalidParams
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.settings import SettingSpec
from tests.gui.helpers import FakeConnection, settle, wait_until

SCHEMA = [
    {"key": "log_level", "type": "enum", "default": "info", "description": "d",
     "choices": ["debug", "info", "warning", "error"]},
    {"key": HEADER_TIMEOUT, "type": "float", "default": 120.0, "minimum": 1.0,
     "maximum": 3600.0, "description": "d"},
    {"key": FIRST_CONTENT_TIMEOUT, "type": "float", "default": 120.0, "minimum": 1.0,
     "maximum": 3600.0, "description": "d"},
    {"key": PINNED_NODE, "type": "string", "default": "", "description": "d"},
    {"key": LLAMACPP_PARALLEL, "type": "int", "default": 2, "minimum": 1, "maximum": 16,
     "description": "d"},
    {"key": LLAMACPP_CONTEXT, "type": "int", "default": 4096, "minimum": 256,
     "maximum": 1048576, "description": "d"},
    {"key": "llamacpp_model", "type": "string", "default": "", "description": "d"},
]  # fmt: skip


def snapshot(schema: list[dict[str, Any]] = SCHEMA, **values: Any) -> dict[str, Any]:
    base = {"log_level": "info", HEADER_TIMEOUT: 120.0, FIRST_CONTENT_TIMEOUT: 120.0,
            PINNED_NODE: "", LLAMACPP_PARALLEL: 2, LLAMACPP_CONTEXT: 4096,
            "llamacpp_model": ""}  # fmt: skip
    keys = {spec["key"] for spec in schema}
    return {"values": {k: v for k, v in (base | values).items() if k in keys}, "schema": schema}


def node(node_id: str, name: str, *sources: str) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": list(sources),
        "addresses": ["192.168.1.9"], "ports": {}, "engines": {}, "reachable": True,
    }  # fmt: skip


NODES = [node("n-box", "gpu-box", "mdns"), node("n-self", "gaming-pc", "self")]


class BrokenAutostart(FileAutostart):
    def enable(self) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))


@dataclass
class Tab:
    connection: FakeConnection
    controller: FrontDoorSettingsController
    preferences: QSettings
    preferences_file: Path
    autostart: FileAutostart
    widget: GeneralSettings


@pytest.fixture
def preferences_file(tmp_path: Path) -> Path:
    return tmp_path / "prefs" / "PAIR.ini"


@pytest.fixture
async def tab(qtbot: QtBot, tmp_path: Path, preferences_file: Path) -> AsyncIterator[Tab]:
    connection = FakeConnection()
    settings = SettingsStore(connection)
    controller = FrontDoorSettingsController(connection, settings)
    preferences = QSettings(str(preferences_file), QSettings.Format.IniFormat)
    autostart = xdg_autostart(tmp_path / "config", ["/usr/bin/pair-gui"])
    widget = GeneralSettings(controller, autostart, preferences, tray_available=True)
    qtbot.addWidget(widget)
    yield Tab(connection, controller, preferences, preferences_file, autostart, widget)
    await controller.close()
    await settings.close()
    await connection.stop()


async def ready(tab: Tab, schema: list[dict[str, Any]] = SCHEMA, **values: Any) -> None:
    tab.connection.script(methods.SETTINGS_GET, snapshot(schema, **values))
    tab.connection.script(methods.DISCOVERY_GET_NODES, NODES)
    tab.connection.become_ready()
    await wait_until(lambda: tab.widget.front_doors_box.spins[HEADER_TIMEOUT].isEnabled(), 5)
    await wait_until(lambda: tab.widget.front_doors_box.pinned_combo.count() == 3, 5)


def set_calls(connection: FakeConnection) -> list[Any]:
    return [params for method, params in connection.calls if method == methods.SETTINGS_SET.name]


def test_check_value_uses_the_schema_bounds() -> None:
    spec = SettingSpec(key="t", type="float", default=1.0, minimum=1.0, maximum=3600.0,
                       description="d")  # fmt: skip
    assert check_value(spec, 30.0) == 30.0
    with pytest.raises(ValueError, match="Must be between 1 and 3600"):
        check_value(spec, 0.5)
    with pytest.raises(ValueError, match="Must be between 1 and 3600"):
        check_value(spec, 5000)


def test_check_value_sends_int_settings_as_ints_and_writes_big_bounds_out() -> None:
    spec = SettingSpec(key="n", type="int", default=4096, minimum=256, maximum=1048576,
                       description="d")  # fmt: skip
    checked = check_value(spec, 8192.0)
    assert (checked, type(checked)) == (8192, int)  # the broker refuses 8192.0 for an int
    with pytest.raises(ValueError, match=r"^Must be between 256 and 1048576\.$"):
        check_value(spec, 2**21)


def test_pinned_node_choices_list_none_self_and_an_unknown_saved_id() -> None:
    nodes = [DiscoveredNode(**n) for n in NODES]  # type: ignore[arg-type]
    choices = pinned_node_choices(nodes, "n-gone-1234567")
    assert [(c.node_id, c.label) for c in choices] == [
        ("", "None"),
        ("n-self", "gaming-pc (this computer)"),
        ("n-box", "gpu-box"),
        ("n-gone-1234567", "Unknown node (n-gone-1)"),
    ]


async def test_start_at_login_writes_and_removes_the_autostart_entry(tab: Tab) -> None:
    box = tab.widget.startup_box
    path = tab.autostart.path
    assert not box.autostart_check.isChecked()
    assert "autostart/pair.desktop" in box.autostart_note.text()
    box.autostart_check.setChecked(True)
    assert path.read_text().splitlines()[:2] == ["[Desktop Entry]", "Type=Application"]
    assert "Exec=/usr/bin/pair-gui" in path.read_text().splitlines()
    box.autostart_check.setChecked(False)
    assert not path.exists()
    assert box.autostart_error.isHidden()


async def test_a_failing_autostart_is_shown_inline_and_unchecked(
    qtbot: QtBot, tmp_path: Path, tab: Tab
) -> None:
    broken = BrokenAutostart(tmp_path / "ro" / "pair.desktop", b"")
    widget = GeneralSettings(tab.controller, broken, tab.preferences, tray_available=True)
    qtbot.addWidget(widget)
    box = widget.startup_box
    box.autostart_check.setChecked(True)
    assert not box.autostart_check.isChecked()
    assert not box.autostart_error.isHidden()
    assert "Could not add the login item" in box.autostart_error.text()
    assert "Permission denied" in box.autostart_error.text()


async def test_minimise_to_tray_is_persisted_and_announced(qtbot: QtBot, tab: Tab) -> None:
    check = tab.widget.startup_box.tray_check
    assert check.isChecked()  # the default
    with qtbot.waitSignal(tab.widget.minimise_to_tray_changed) as changed:
        check.setChecked(False)
    assert changed.args == [False]
    reread = QSettings(str(tab.preferences_file), QSettings.Format.IniFormat)
    assert reread.value(MINIMISE_TO_TRAY_KEY, type=bool) is False
    assert minimise_to_tray(reread) is False
    assert tab.preferences_file.exists()


async def test_without_a_tray_the_option_is_off_and_explained(qtbot: QtBot, tab: Tab) -> None:
    widget = GeneralSettings(tab.controller, tab.autostart, tab.preferences, tray_available=False)
    qtbot.addWidget(widget)
    box = widget.startup_box
    assert not box.tray_check.isEnabled()
    assert not box.tray_check.isChecked()
    assert "no system tray" in box.tray_note.text()


async def test_timeouts_follow_the_schema_and_save_validated_values(tab: Tab) -> None:
    box = tab.widget.front_doors_box
    spin = box.spins[HEADER_TIMEOUT]
    assert not spin.isEnabled()  # not connected
    await ready(tab, **{FIRST_CONTENT_TIMEOUT: 300.0})
    assert (spin.minimum(), spin.maximum(), spin.value()) == (1.0, 3600.0, 120.0)
    assert box.spins[FIRST_CONTENT_TIMEOUT].value() == 300.0
    assert set_calls(tab.connection) == []  # showing values saves nothing
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{HEADER_TIMEOUT: 90.0}))
    spin.setValue(90)
    await wait_until(lambda: set_calls(tab.connection), 5)
    assert set_calls(tab.connection) == [{"values": {HEADER_TIMEOUT: 90.0}}]
    spin.setValue(99999)  # typed beyond the schema: the box keeps it in range
    await settle()
    assert set_calls(tab.connection)[-1] == {"values": {HEADER_TIMEOUT: 3600.0}}


async def test_a_rejected_value_shows_the_reason_and_the_saved_value(tab: Tab) -> None:
    await ready(tab)
    box = tab.widget.front_doors_box
    spin = box.spins[HEADER_TIMEOUT]
    error = box.errors[HEADER_TIMEOUT]
    rejection = InvalidParams(
        f"Invalid params: setting '{HEADER_TIMEOUT}' must be at most 600; got 700.0"
    )
    tab.connection.script(methods.SETTINGS_SET, rejection)
    spin.setValue(700)
    await wait_until(lambda: not error.isHidden(), 5, "the error")
    assert error.text() == "Must be at most 600; got 700.0."
    assert spin.value() == 120.0  # back to what the broker holds
    # A value the schema itself refuses never reaches the broker.
    calls = len(set_calls(tab.connection))
    tab.controller.set_value(FIRST_CONTENT_TIMEOUT, 0.5)
    assert box.errors[FIRST_CONTENT_TIMEOUT].text() == "Must be between 1 and 3600."
    assert len(set_calls(tab.connection)) == calls
    # A later success clears the message.
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{HEADER_TIMEOUT: 200.0}))
    spin.setValue(200)
    await wait_until(lambda: error.isHidden(), 5, "the error to clear")


async def test_settings_changed_pushes_update_the_controls(tab: Tab) -> None:
    await ready(tab)
    tab.connection.push(methods.SETTINGS_CHANGED, snapshot(**{HEADER_TIMEOUT: 45.0}))
    assert tab.widget.front_doors_box.spins[HEADER_TIMEOUT].value() == 45.0
    assert set_calls(tab.connection) == []


async def test_pinned_node_offers_none_and_the_known_nodes(tab: Tab) -> None:
    await ready(tab, **{PINNED_NODE: "n-box"})
    combo = tab.widget.front_doors_box.pinned_combo
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "None",
        "gaming-pc (this computer)",
        "gpu-box",
    ]
    assert combo.currentText() == "gpu-box"
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{PINNED_NODE: "n-self"}))
    combo.activated.emit(1)
    await wait_until(lambda: set_calls(tab.connection), 5)
    assert set_calls(tab.connection) == [{"values": {PINNED_NODE: "n-self"}}]
    assert combo.currentText() == "gaming-pc (this computer)"
    combo.activated.emit(0)
    await wait_until(lambda: len(set_calls(tab.connection)) == 2, 5)
    assert set_calls(tab.connection)[-1] == {"values": {PINNED_NODE: ""}}


async def test_losing_the_service_disables_the_front_door_controls(tab: Tab) -> None:
    await ready(tab)
    tab.connection.lose_session()
    box = tab.widget.front_doors_box
    assert not box.spins[HEADER_TIMEOUT].isEnabled()
    assert not box.pinned_combo.isEnabled()
    assert not box.offline_note.isHidden()


async def test_llamacpp_box_shows_the_saved_values_in_the_schema_ranges(tab: Tab) -> None:
    box = tab.widget.llamacpp_box
    parallel, context = box.spins[LLAMACPP_PARALLEL], box.spins[LLAMACPP_CONTEXT]
    assert not parallel.isEnabled() and not context.isEnabled()  # not connected
    assert not box.offline_note.isHidden()
    await ready(tab, **{LLAMACPP_PARALLEL: 4, LLAMACPP_CONTEXT: 32768})
    assert (parallel.minimum(), parallel.maximum(), parallel.value()) == (1, 16, 4)
    assert (context.minimum(), context.maximum(), context.value()) == (256, 1048576, 32768)
    assert context.singleStep() == 1024
    assert context.suffix() == " tokens"
    assert parallel.isEnabled() and context.isEnabled()
    assert box.offline_note.isHidden()
    assert set_calls(tab.connection) == []  # showing values saves nothing
    tab.connection.push(methods.SETTINGS_CHANGED, snapshot(**{LLAMACPP_PARALLEL: 8}))
    assert parallel.value() == 8
    assert set_calls(tab.connection) == []


async def test_llamacpp_changes_are_sent_as_ints(tab: Tab) -> None:
    await ready(tab)
    box = tab.widget.llamacpp_box
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{LLAMACPP_PARALLEL: 3}))
    box.spins[LLAMACPP_PARALLEL].stepUp()
    await wait_until(lambda: set_calls(tab.connection), 5)
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{LLAMACPP_CONTEXT: 5120}))
    box.spins[LLAMACPP_CONTEXT].stepUp()
    await wait_until(lambda: len(set_calls(tab.connection)) == 2, 5)
    assert set_calls(tab.connection) == [
        {"values": {LLAMACPP_PARALLEL: 3}},
        {"values": {LLAMACPP_CONTEXT: 5120}},
    ]
    assert all(
        type(v) is int for call in set_calls(tab.connection) for v in call["values"].values()
    )
    assert box.spins[LLAMACPP_CONTEXT].value() == 5120
    assert box.errors[LLAMACPP_CONTEXT].isHidden()


async def test_a_refused_llamacpp_value_shows_the_reason_and_the_saved_value(tab: Tab) -> None:
    await ready(tab)
    box = tab.widget.llamacpp_box
    spin, error = box.spins[LLAMACPP_CONTEXT], box.errors[LLAMACPP_CONTEXT]
    rejection = InvalidParams(
        f"Invalid params: setting '{LLAMACPP_CONTEXT}' must be at most 65536; got 131072"
    )
    tab.connection.script(methods.SETTINGS_SET, rejection)
    spin.setValue(131072)
    await wait_until(lambda: not error.isHidden(), 5, "the error")
    assert error.text() == "Must be at most 65536; got 131072."
    assert spin.value() == 4096  # back to what the broker holds
    assert box.errors[LLAMACPP_PARALLEL].isHidden()
    assert tab.widget.front_doors_box.errors[HEADER_TIMEOUT].isHidden()
    # A value the schema itself refuses never reaches the broker.
    calls = len(set_calls(tab.connection))
    tab.controller.set_value(LLAMACPP_PARALLEL, 17)
    assert box.errors[LLAMACPP_PARALLEL].text() == "Must be between 1 and 16."
    assert len(set_calls(tab.connection)) == calls


async def test_offline_or_an_older_broker_disables_the_llamacpp_controls(tab: Tab) -> None:
    await ready(tab)
    box = tab.widget.llamacpp_box
    tab.controller.set_value(LLAMACPP_PARALLEL, 99)
    assert not box.errors[LLAMACPP_PARALLEL].isHidden()
    tab.connection.lose_session()
    assert not box.spins[LLAMACPP_PARALLEL].isEnabled()
    assert not box.spins[LLAMACPP_CONTEXT].isEnabled()
    assert not box.offline_note.isHidden()
    assert box.errors[LLAMACPP_PARALLEL].isHidden()
    older = [spec for spec in SCHEMA if not spec["key"].startswith("llamacpp_")]
    await ready(tab, older)
    assert not box.spins[LLAMACPP_PARALLEL].isEnabled()
    assert not box.spins[LLAMACPP_CONTEXT].isEnabled()


async def test_the_llamacpp_controls_line_up_with_the_front_doors(tab: Tab) -> None:
    await ready(tab)
    tab.widget.show()
    await settle()
    front, llamacpp = tab.widget.front_doors_box, tab.widget.llamacpp_box
    left = front.spins[HEADER_TIMEOUT].mapTo(
        tab.widget, front.spins[HEADER_TIMEOUT].rect().topLeft()
    )
    for spin in llamacpp.spins.values():
        assert spin.mapTo(tab.widget, spin.rect().topLeft()).x() == left.x()


PLACEMENT_SPEC: dict[str, Any] = {
    "key": PLACEMENT,
    "type": "enum",
    "default": "pair",
    "choices": ["pair", "reference"],
    "description": "d",
}


async def test_the_placement_policy_shows_the_saved_rule_and_saves_a_choice(tab: Tab) -> None:
    schema = [*SCHEMA, PLACEMENT_SPEC]
    await ready(tab, schema, **{PLACEMENT: "reference"})
    combo = tab.widget.front_doors_box.placement_combo
    await wait_until(lambda: combo.isEnabled(), 5)
    assert [combo.itemData(i) for i in range(combo.count())] == ["pair", "reference"]
    assert combo.currentData() == "reference"
    tab.connection.script(methods.SETTINGS_SET, snapshot(schema, **{PLACEMENT: "pair"}))
    combo.activated.emit(0)
    await wait_until(lambda: set_calls(tab.connection), 5)
    assert set_calls(tab.connection) == [{"values": {PLACEMENT: "pair"}}]
    assert combo.currentData() == "pair"


async def test_an_older_broker_without_the_placement_setting_leaves_it_off(tab: Tab) -> None:
    await ready(tab)
    assert not tab.widget.front_doors_box.placement_combo.isEnabled()
