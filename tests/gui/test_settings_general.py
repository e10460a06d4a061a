"""Settings → General: start at login, minimise to tray, front-door timeouts and pinned node."""

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
    PINNED_NODE,
    FrontDoorSettingsController,
    check_value,
    pinned_node_choices,
)
from app.window.settings_general import MINIMISE_TO_TRAY_KEY, GeneralSettings, minimise_to_tray
from backend.protocol import methods
from backend.protocol.errors import InvalidParams
from backend.protocol.types import DiscoveredNode, SettingSpec
from tests.gui.helpers import FakeConnection, settle, wait_until

SCHEMA = [
    {"key": "log_level", "type": "enum", "default": "info", "description": "d",
     "choices": ["debug", "info", "warning", "error"]},
    {"key": HEADER_TIMEOUT, "type": "float", "default": 120.0, "minimum": 1.0,
     "maximum": 3600.0, "description": "d"},
    {"key": FIRST_CONTENT_TIMEOUT, "type": "float", "default": 120.0, "minimum": 1.0,
     "maximum": 3600.0, "description": "d"},
    {"key": PINNED_NODE, "type": "string", "default": "", "description": "d"},
]  # fmt: skip


def snapshot(**values: Any) -> dict[str, Any]:
    base = {"log_level": "info", HEADER_TIMEOUT: 120.0, FIRST_CONTENT_TIMEOUT: 120.0,
            PINNED_NODE: ""}  # fmt: skip
    return {"values": base | values, "schema": SCHEMA}


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
    controller = FrontDoorSettingsController(connection)
    preferences = QSettings(str(preferences_file), QSettings.Format.IniFormat)
    autostart = xdg_autostart(tmp_path / "config", ["/usr/bin/pair-gui"])
    widget = GeneralSettings(controller, autostart, preferences, tray_available=True)
    qtbot.addWidget(widget)
    yield Tab(connection, controller, preferences, preferences_file, autostart, widget)
    await controller.close()
    await connection.stop()


async def ready(tab: Tab, **values: Any) -> None:
    tab.connection.script(methods.SETTINGS_GET, snapshot(**values))
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
