"""The broker's side of the doors: which door an engine's models go to, and the settings that
move a door.

The door-to-engine map and the routing table itself are wire facts (``backend.protocol.proxy``):
the broker builds the table (``table.py``) and the worker routes by it.
"""

from __future__ import annotations

from collections.abc import Mapping

# The broker's settings default for the proxy timeouts is the table's own default.
from backend.protocol.proxy import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from backend.protocol.proxy import DOOR_ENGINES as DOOR_ENGINES
from backend.protocol.proxy import Door
from backend.protocol.types.settings import SettingValue

ENGINE_DOORS: Mapping[str, Door] = {engine: door for door, engine in DOOR_ENGINES.items()}
# The settings that move a door at run time (0: the port the node was started with).
DOOR_PORT_SETTINGS: Mapping[str, Door] = {
    "ollama_door_port": "ollama",
    "openai_door_port": "openai",
    "llamacpp_door_port": "llamacpp",
}


def door_ports(values: Mapping[str, SettingValue]) -> dict[Door, int]:
    """The door ports ``values`` (settings) ask for, by door; 0 for the configured one."""
    ports: dict[Door, int] = {}
    for key, door in DOOR_PORT_SETTINGS.items():
        value = values.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            ports[door] = value
    return ports
