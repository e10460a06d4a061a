"""Where requests may go: the routing table the broker sends its proxy worker (``proxy/targets``).

Per engine, every node that runs it: this node's own engine (``local``), another PAIR node
(``peer``, reached through that node's front door under ``RELAY_PREFIX`` so it serves the
request with its own engine and never routes it again), or a bare engine added by address
(``engine``). Each carries the models its inventory lists; only those nodes are eligible.
"""

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
ENGINE_DOORS: Mapping[str, Door] = {engine: door for door, engine in DOOR_ENGINES.items()}
TARGETS_NOTIFICATION = "proxy/targets"
CLOSE_NOTIFICATION = "proxy/close-listeners"
JOB_NOTIFICATION = "proxy/job"
# A peer serves requests under this path with its own engine only (no second routing hop).
RELAY_PREFIX = "/_pair/relay"
# A peer answers here (long poll) once a relayed request holds one of its engine's slots.
RELAY_STARTED_PATH = "/_pair/relay-started"
DEFAULT_TIMEOUT_S = 120.0

TargetKind = Literal["local", "peer", "engine"]


class RouteTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One node that runs an engine: how to reach it and what its inventory lists.

    ``base_url`` is the engine's own URL for ``local`` and ``engine`` targets, and the peer's
    front door for that engine for ``peer`` targets. ``slots`` (local only) is how many
    requests the engine runs at once per model, ``model_slots`` per-model exceptions.
    """

    node_id: str
    kind: TargetKind
    base_url: str
    name: str = ""
    models: list[str] = msgspec.field(default_factory=list)
    slots: int = 1
    model_slots: dict[str, int] = msgspec.field(default_factory=dict)


class ProxyTargets(msgspec.Struct, frozen=True, kw_only=True):
    """The routing table: targets per engine name (``ollama``, ``lmstudio``, ``llamacpp``).

    ``loads`` is each node's pending work at snapshot ``generation`` (reservations taken since
    are the proxy's own). ``pins`` names a node to try first per engine; ``priority`` is the
    scheduler's order. Timeouts are seconds for the response headers and for the first body
    byte after them.
    """

    node_id: str = ""
    generation: int = 0
    engines: dict[str, list[RouteTarget]] = msgspec.field(default_factory=dict)
    loads: dict[str, int] = msgspec.field(default_factory=dict)
    pins: dict[str, str] = msgspec.field(default_factory=dict)
    priority: list[str] = msgspec.field(default_factory=list)
    header_timeout_s: float = DEFAULT_TIMEOUT_S
    first_content_timeout_s: float = DEFAULT_TIMEOUT_S


def targets_for(targets: ProxyTargets, door: Door) -> list[RouteTarget]:
    """Every node running the engine behind ``door`` (local first, then the table's order)."""
    found = targets.engines.get(DOOR_ENGINES[door], [])
    return sorted(found, key=lambda target: target.kind != "local")


def local_target(targets: ProxyTargets, door: Door) -> RouteTarget | None:
    """This node's own engine behind ``door``, if it runs."""
    return next((t for t in targets_for(targets, door) if t.kind == "local"), None)


def owners(targets: ProxyTargets, door: Door, model: str) -> list[RouteTarget]:
    """The nodes whose inventory for the door's engine has ``model`` (by its naming rule)."""
    engine = DOOR_ENGINES[door]
    return [t for t in targets_for(targets, door) if has_model(engine, t.models, model)]


def upstream_url(target: RouteTarget, path_and_query: str) -> str:
    """The URL that serves ``path_and_query`` on ``target`` (a peer's through its relay)."""
    base = target.base_url.rstrip("/")
    if target.kind == "peer":
        return f"{base}{RELAY_PREFIX}{path_and_query}"
    return f"{base}{path_and_query}"


def local_only(node_id: str, **engines: tuple[str, list[str]]) -> ProxyTargets:
    """A table with only this node's engines: ``engine=(base_url, models)``."""
    return ProxyTargets(
        node_id=node_id,
        engines={
            engine: [RouteTarget(node_id=node_id, kind="local", base_url=url, models=models)]
            for engine, (url, models) in engines.items()
        },
    )
