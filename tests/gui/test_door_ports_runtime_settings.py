"""Settings → General: the front doors' ports, saved as typed and shown with the broker's
reason when it refuses one (a port another program holds); the Endpoints read the doors again
once a setting changed."""

from __future__ import annotations

from typing import Any

from app.controllers.endpoints import DOOR_PORTS, EndpointsController
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import Conflict
from tests.gui.helpers import FakeConnection, settle, wait_until
from tests.gui.test_endpoints import status
from tests.gui.test_settings_general import SCHEMA, Tab, ready, set_calls, snapshot
from tests.gui.test_settings_general import preferences_file as preferences_file
from tests.gui.test_settings_general import tab as tab

OLLAMA = DOOR_PORTS["ollama"]
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
