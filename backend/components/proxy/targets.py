"""Which engine's models each front door serves, shared by the broker's table and the worker.

The routing table itself is a wire payload (``backend.protocol.proxy``): the broker builds it
(``table.py``) and the worker routes by it.
"""

from __future__ import annotations

from collections.abc import Mapping

# The broker's settings default for the proxy timeouts is the table's own default.
from backend.protocol.proxy import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from backend.protocol.proxy import Door
from backend.protocol.types import EngineName

DOOR_ENGINES: Mapping[Door, EngineName] = {
    "ollama": EngineName("ollama"),
    "openai": EngineName("lmstudio"),
    "llamacpp": EngineName("llamacpp"),
}
ENGINE_DOORS: Mapping[str, Door] = {engine: door for door, engine in DOOR_ENGINES.items()}
