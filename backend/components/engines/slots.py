"""How many requests an engine runs at once, from the source its manifest names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from backend.components.engines.http import EngineEndpoint, get_json

if TYPE_CHECKING:
    from backend.components.engines.manifest import SlotsSpec

_TIMEOUT_S = 5.0  # each HTTP question about slots


class RoutingSlots(msgspec.Struct, frozen=True):
    """What the proxy's scheduler may run at once on an engine: ``per_model`` for the models
    the engine reports a count of, ``slots`` for any other model."""

    slots: int
    per_model: Mapping[str, int] = msgspec.field(default_factory=dict)


def routing_slots(
    spec: SlotsSpec, running_slots: int | None, per_model: Mapping[str, int]
) -> RoutingSlots:
    """The capacity the routing table gives a running engine (``running_slots``: its status's
    count, None once it stopped or crashed; ``per_model``: its last listed counts per model).

    LM Studio's ``parallel`` belongs to each loaded instance, so a loaded model gets its own
    count and a model it would load on demand (JIT) the manifest's default, never the sum over
    the models loaded when the engine started. The other sources count per engine, and every
    model runs that many. A count that is not positive is no count.
    """
    if spec.source == "loaded_instances":
        counted = {model: n for model, n in per_model.items() if n > 0}
        return RoutingSlots(spec.default, counted)
    return RoutingSlots(running_slots if running_slots and running_slots > 0 else spec.default)


class SlotSource(msgspec.Struct, frozen=True):
    """What counting a running engine's slots reads: its manifest's slot source, the
    environment and arguments PAIR started it with (None when PAIR did not start it: what runs
    then has an environment and arguments PAIR does not know), and where it answers HTTP."""

    spec: SlotsSpec
    env: Mapping[str, str] | None
    argv: list[str] | None
    endpoint: EngineEndpoint


async def engine_slots(source: SlotSource) -> int:
    """The engine's total slot count right now."""
    spec = source.spec
    if spec.source == "env":
        return _from_env(source.env, spec.env, spec.default)
    if spec.source == "args":
        return await _from_args(source, spec.flags, spec.props, spec.default)
    per_model = await loaded_instance_slots(source.endpoint, spec.default)
    return sum(per_model.values()) if per_model else spec.default


def _from_env(env: Mapping[str, str] | None, name: str | None, default: int) -> int:
    if name is None or env is None:
        return default
    configured = env.get(name) or os.environ.get(name)
    return _positive(configured, default)


async def _from_args(source: SlotSource, flags: list[str], props: str | None, default: int) -> int:
    argv = source.argv or []
    for index, token in enumerate(argv[:-1]):
        if token in flags:
            return _positive(argv[index + 1], default)
    if props is not None:
        document = await get_json(source.endpoint, props, timeout=_TIMEOUT_S)
        if isinstance(document, dict):
            return _positive(document.get("total_slots"), default)
    return default


async def loaded_instance_slots(endpoint: EngineEndpoint, default: int) -> dict[str, int]:
    """LM Studio: each loaded instance's ``config.parallel`` (``default`` when absent), summed
    per model."""
    document = await get_json(endpoint, "/api/v1/models", timeout=_TIMEOUT_S)
    slots: dict[str, int] = {}
    models = document.get("models") if isinstance(document, dict) else None
    for model in models if isinstance(models, list) else []:
        instances = model.get("loaded_instances") if isinstance(model, dict) else None
        for instance in instances if isinstance(instances, list) else []:
            config = instance.get("config") if isinstance(instance, dict) else None
            parallel = config.get("parallel") if isinstance(config, dict) else None
            key = str(model.get("key"))
            slots[key] = slots.get(key, 0) + _positive(parallel, default)
    return slots


def _positive(value: object, default: int) -> int:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default
