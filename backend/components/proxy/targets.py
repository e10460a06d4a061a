"""Where the engines behind the front doors are: sent by the broker to the proxy worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from backend.components.proxy.naming import has_model

Door = Literal["ollama", "openai", "llamacpp"]
DOORS: tuple[Door, ...] = ("ollama", "openai", "llamacpp")
# The engine whose models each front door serves.
DOOR_ENGINES: Mapping[Door, str] = {
    "ollama": "ollama",
    "openai": "lmstudio",
    "llamacpp": "llamacpp",
}
TARGETS_NOTIFICATION = "proxy/targets"
CLOSE_NOTIFICATION = "proxy/close-listeners"


class EngineTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One running engine: its base URL and the models it lists."""

    base_url: str
    models: list[str] = msgspec.field(default_factory=list)


class ProxyTargets(msgspec.Struct, frozen=True, kw_only=True):
    """Every running engine by engine name (``ollama``, ``lmstudio``, ``llamacpp``)."""

    engines: dict[str, EngineTarget] = msgspec.field(default_factory=dict)


def engine_for(targets: ProxyTargets, door: Door) -> EngineTarget | None:
    """The engine behind ``door``, if it runs."""
    return targets.engines.get(DOOR_ENGINES[door])


def serves(targets: ProxyTargets, door: Door, model: str) -> EngineTarget | None:
    """The engine behind ``door`` if it has ``model`` (by that engine's naming rule)."""
    engine = DOOR_ENGINES[door]
    target = targets.engines.get(engine)
    if target is None or not has_model(engine, target.models, model):
        return None
    return target
