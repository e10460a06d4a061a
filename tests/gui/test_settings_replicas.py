"""Settings → General → Replicas: the mode, target wait, idle time (minutes, saved in seconds)
and computers per model follow the schema, save through the settings controller, and show the
broker's reason when it refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.autostart import xdg_autostart
from app.controllers.endpoints import FrontDoorSettingsController
from app.stores.settings import SettingsStore
from app.window.settings_general import GeneralSettings
from app.window.settings_replicas import (
    REPLICAS_MAX,
    REPLICAS_MODE,
    REPLICAS_TARGET_WAIT,
    REPLICAS_TTL,
    ReplicasBox,
)
from backend.protocol import methods
from backend.protocol.errors import InvalidParams
from tests.gui.helpers import FakeConnection, settle, wait_until

SCHEMA = [
    {"key": REPLICAS_MODE, "type": "enum", "default": "auto", "description": "d",
     "choices": ["auto", "on", "off"]},
    {"key": REPLICAS_TARGET_WAIT, "type": "float", "default": 10.0, "minimum": 1.0,
     "maximum": 600.0, "description": "d"},
    {"key": REPLICAS_TTL, "type": "float", "default": 300.0, "minimum": 30.0,
     "maximum": 86400.0, "description": "d"},
    {"key": REPLICAS_MAX, "type": "int", "default": 3, "minimum": 1, "maximum": 16,
     "description": "d"},
]  # fmt: skip
DEFAULTS = {REPLICAS_MODE: "auto", REPLICAS_TARGET_WAIT: 10.0, REPLICAS_TTL: 300.0,
            REPLICAS_MAX: 3}  # fmt: skip


def snapshot(**values: Any) -> dict[str, Any]:
    return {"values": DEFAULTS | values, "schema": SCHEMA}


@dataclass
class Tab:
    connection: FakeConnection
    controller: FrontDoorSettingsController
    box: ReplicasBox


@pytest.fixture
async def tab(qtbot: QtBot) -> AsyncIterator[Tab]:
    connection = FakeConnection()
    settings = SettingsStore(connection)
    controller = FrontDoorSettingsController(connection, settings)
    box = ReplicasBox(controller)
    qtbot.addWidget(box)
    yield Tab(connection, controller, box)
    await controller.close()
    await settings.close()
    await connection.stop()


async def ready(tab: Tab, **values: Any) -> None:
    tab.connection.script(methods.SETTINGS_GET, snapshot(**values))
    tab.connection.script(methods.DISCOVERY_GET_NODES, [])
    tab.connection.become_ready()
    await wait_until(lambda: tab.box.mode_combo.isEnabled(), 5)


def set_calls(connection: FakeConnection) -> list[Any]:
    return [params for method, params in connection.calls if method == methods.SETTINGS_SET.name]


async def test_the_fields_are_off_until_connected_then_show_the_saved_values(tab: Tab) -> None:
    box = tab.box
    assert not box.mode_combo.isEnabled() and not box.ttl_spin.isEnabled()
    assert not box.offline_note.isHidden()
    await ready(tab, **{REPLICAS_MODE: "off", REPLICAS_TTL: 600.0})
    assert box.offline_note.isHidden()
    assert box.mode_combo.currentText() == "Off"
    assert [box.mode_combo.itemText(i) for i in range(3)] == ["Automatic", "On", "Off"]
    assert (box.wait_spin.minimum(), box.wait_spin.maximum(), box.wait_spin.value()) == (
        1.0,
        600.0,
        10.0,
    )
    assert (box.ttl_spin.minimum(), box.ttl_spin.maximum(), box.ttl_spin.value()) == (
        0.5,
        1440.0,
        10.0,
    )
    assert (box.max_spin.minimum(), box.max_spin.maximum(), box.max_spin.value()) == (1, 16, 3)
    assert set_calls(tab.connection) == []  # showing values saves nothing
    assert box.ttl_spin.text() == "10 min"
    tab.connection.push(methods.SETTINGS_CHANGED, snapshot(**{REPLICAS_TTL: 30.0}))
    assert (box.ttl_spin.value(), box.ttl_spin.text()) == (0.5, "0.5 min")
    assert set_calls(tab.connection) == []


async def test_changing_each_field_saves_its_setting(tab: Tab) -> None:
    await ready(tab)
    box = tab.box
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{REPLICAS_MODE: "on"}))
    box.mode_combo.activated.emit(1)
    await wait_until(lambda: len(set_calls(tab.connection)) == 1, 5)
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{REPLICAS_TARGET_WAIT: 25.0}))
    box.wait_spin.setValue(25)
    await wait_until(lambda: len(set_calls(tab.connection)) == 2, 5)
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{REPLICAS_TTL: 900.0}))
    box.ttl_spin.setValue(15)  # minutes on screen, seconds in the setting
    await wait_until(lambda: len(set_calls(tab.connection)) == 3, 5)
    tab.connection.script(methods.SETTINGS_SET, snapshot(**{REPLICAS_MAX: 5}))
    box.max_spin.setValue(5)
    await wait_until(lambda: len(set_calls(tab.connection)) == 4, 5)
    assert set_calls(tab.connection) == [
        {"values": {REPLICAS_MODE: "on"}},
        {"values": {REPLICAS_TARGET_WAIT: 25.0}},
        {"values": {REPLICAS_TTL: 900.0}},
        {"values": {REPLICAS_MAX: 5}},
    ]


async def test_a_refused_value_shows_the_reason_and_the_saved_value_again(tab: Tab) -> None:
    await ready(tab)
    box = tab.box
    error = box.errors[REPLICAS_MAX]
    refusal = InvalidParams(f"Invalid params: setting '{REPLICAS_MAX}' must be at most 4; got 9")
    tab.connection.script(methods.SETTINGS_SET, refusal)
    box.max_spin.setValue(9)
    await wait_until(lambda: not error.isHidden(), 5, "the error")
    assert error.text() == "Must be at most 4; got 9."
    assert box.max_spin.value() == 3
    # A value the schema refuses never reaches the broker.
    calls = len(set_calls(tab.connection))
    tab.controller.set_value(REPLICAS_TTL, 10.0)
    await settle()
    assert box.errors[REPLICAS_TTL].text() == "Must be between 30 and 86400."
    assert len(set_calls(tab.connection)) == calls


async def test_the_general_tab_holds_the_box(qtbot: QtBot, tab: Tab, tmp_path: Path) -> None:
    preferences = QSettings(str(tmp_path / "PAIR.ini"), QSettings.Format.IniFormat)
    autostart = xdg_autostart(tmp_path / "config", ["/usr/bin/pair-gui"])
    widget = GeneralSettings(tab.controller, autostart, preferences, tray_available=True)
    qtbot.addWidget(widget)
    assert widget.replicas_box.title() == "Replicas"
