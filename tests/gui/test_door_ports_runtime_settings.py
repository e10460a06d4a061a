"""Settings → General: the front doors' ports, saved as typed and shown with the broker's
reason when it refuses one (a port another program holds); each door's real port shown (the
llama.cpp door's too), a door refused PAIR's own other door's port; the Endpoints read the
doors again once a setting changed; the demo offers no login item."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.autostart import xdg_autostart
from app.controllers.endpoints import DOOR_PORTS, EndpointsController, FrontDoorSettingsController
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.settings_general import GeneralSettings
from app.window.settings_startup import DEMO_AUTOSTART_NOTE
from backend.protocol import methods
from backend.protocol.errors import Conflict
from tests.gui.helpers import FakeConnection, settle, wait_until
from tests.gui.test_endpoints import status
from tests.gui.test_settings_general import SCHEMA, Tab, ready, set_calls, snapshot
from tests.gui.test_settings_general import preferences_file as preferences_file
from tests.gui.test_settings_general import tab as tab

OLLAMA = DOOR_PORTS["ollama"]
LLAMACPP = DOOR_PORTS["llamacpp"]
SERVING = {
    "ollama": "http://127.0.0.1:47533",
    "openai": "http://127.0.0.1:44513",
    "llamacpp": "http://127.0.0.1:48080",
}
PORTS_SCHEMA = [
    *SCHEMA,
    *(
        {"key": key, "type": "int", "default": 0, "minimum": 0, "maximum": 65535,
         "description": "d"}
        for key in DOOR_PORTS.values()
    ),
]  # fmt: skip


def ports(**values: Any) -> dict[str, Any]:
    return snapshot(PORTS_SCHEMA, **dict.fromkeys(DOOR_PORTS.values(), 0) | values)


async def test_a_typed_port_is_saved_and_a_taken_one_shows_why(tab: Tab) -> None:
    box = tab.widget.front_doors_box
    spin = box.port_spins[OLLAMA]
    assert not spin.isEnabled()  # not connected
    await ready(tab, PORTS_SCHEMA, **dict.fromkeys(DOOR_PORTS.values(), 0))
    assert spin.isEnabled() and spin.text() == "As started"
    tab.connection.script(methods.SETTINGS_SET, ports(**{OLLAMA: 11500}))
    spin.setValue(11500)
    await wait_until(lambda: set_calls(tab.connection), 5)
    assert set_calls(tab.connection) == [{"values": {OLLAMA: 11500}}]
    refusal = Conflict(
        "Port 8080 is used by another program; the ollama front door stays on port 11500. "
        "Choose another port or free this one."
    )
    tab.connection.script(methods.SETTINGS_SET, refusal)
    spin.setValue(8080)
    error = box.errors[OLLAMA]
    await wait_until(lambda: not error.isHidden(), 5, "the reason")
    assert error.text().startswith("Port 8080 is used by another program")
    assert spin.value() == 11500, "the saved port again"


async def test_an_older_broker_without_the_setting_leaves_the_port_off(tab: Tab) -> None:
    await ready(tab)
    assert not tab.widget.front_doors_box.port_spins[OLLAMA].isEnabled()
    await settle()
    assert set_calls(tab.connection) == []


async def test_the_endpoints_are_read_again_when_a_setting_changes() -> None:
    connection = FakeConnection()
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    controller = EndpointsController(connection, engines, settings)
    connection.script(methods.STATUS, status({"ollama": "http://127.0.0.1:11434"}, []))
    connection.become_ready()
    await wait_until(lambda: controller.known, 5)
    connection.script(methods.STATUS, status({"ollama": "http://127.0.0.1:11500"}, []))
    connection.push(methods.SETTINGS_CHANGED, ports(**{OLLAMA: 11500}))
    await wait_until(lambda: controller.front_doors["ollama"].endswith(":11500"), 5)
    await controller.close()
    await engines.close()
    await settings.close()
    await connection.stop()


@dataclass
class LiveTab:
    connection: FakeConnection
    widget: GeneralSettings


@pytest.fixture
async def live_tab(qtbot: QtBot, tmp_path: Path) -> AsyncIterator[LiveTab]:
    """The tab as the app builds it: the doors' real ports from the endpoints controller."""
    connection = FakeConnection()
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    controller = FrontDoorSettingsController(connection, settings)
    endpoints = EndpointsController(connection, engines, settings)
    preferences = QSettings(str(tmp_path / "PAIR.ini"), QSettings.Format.IniFormat)
    autostart = xdg_autostart(tmp_path / "config", ["/usr/bin/pair-gui"])
    widget = GeneralSettings(
        controller, autostart, preferences, tray_available=True, endpoints=endpoints, demo=False
    )
    qtbot.addWidget(widget)
    connection.script(methods.STATUS, status(SERVING, []))
    connection.script(methods.SETTINGS_GET, ports())
    connection.script(methods.DISCOVERY_GET_NODES, [])
    connection.become_ready()
    spins = widget.front_doors_box.port_spins
    await wait_until(lambda: spins[OLLAMA].value() == 47533 and spins[OLLAMA].isEnabled(), 5)
    yield LiveTab(connection, widget)
    for closing in (controller, endpoints, engines, settings):
        await closing.close()
    await connection.stop()


async def test_each_door_shows_the_port_it_listens_on_llamacpp_included(
    live_tab: LiveTab,
) -> None:
    spins = live_tab.widget.front_doors_box.port_spins
    shown = {key: spin.text() for key, spin in spins.items()}
    assert shown == {OLLAMA: "47533", DOOR_PORTS["openai"]: "44513", LLAMACPP: "48080"}
    assert all((spin.minimum(), spin.maximum()) == (1024, 65535) for spin in spins.values())
    live_tab.connection.script(methods.SETTINGS_SET, ports(**{LLAMACPP: 48100}))
    moved = {**SERVING, "llamacpp": "http://127.0.0.1:48100"}
    live_tab.connection.script(methods.STATUS, status(moved, []))
    spins[LLAMACPP].setValue(48100)
    await wait_until(lambda: set_calls(live_tab.connection), 5)
    assert set_calls(live_tab.connection) == [{"values": {LLAMACPP: 48100}}]
    live_tab.connection.push(methods.SETTINGS_CHANGED, ports(**{LLAMACPP: 48100}))
    await wait_until(lambda: spins[LLAMACPP].text() == "48100", 5, "the moved door")


async def test_a_door_moved_onto_pairs_own_door_says_so_and_sends_nothing(
    live_tab: LiveTab,
) -> None:
    box = live_tab.widget.front_doors_box
    box.port_spins[OLLAMA].setValue(48080)
    error = box.errors[OLLAMA]
    assert error.text() == "Port 48080 is used by PAIR's llama.cpp door; choose another port."
    assert not error.isHidden() and box.port_spins[OLLAMA].value() == 47533
    await settle()
    assert set_calls(live_tab.connection) == []


async def test_the_demo_offers_no_login_item(qtbot: QtBot, tab: Tab, tmp_path: Path) -> None:
    widget = GeneralSettings(
        tab.controller, tab.autostart, tab.preferences, tray_available=True, demo=True
    )
    qtbot.addWidget(widget)
    assert widget.startup_box.autostart_check.isHidden()
    assert widget.startup_box.autostart_note.text() == DEMO_AUTOSTART_NOTE
    assert not tab.widget.startup_box.autostart_check.isHidden()
