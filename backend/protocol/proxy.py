"""The routing table the broker sends its proxy worker (the ``proxy/targets`` push).

Per engine, every node that runs it: this node's own engine (``local``), another PAIR node
(``peer``, reached through that node's front door under its relay prefix so it serves the
request with its own engine and never routes it again), or a bare engine added by address
(``engine``). Each carries the models its inventory lists; only those nodes are eligible.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from backend.protocol.types import Wire

Door = Literal["ollama", "openai", "llamacpp"]
DOORS: tuple[Door, ...] = ("ollama", "openai", "llamacpp")
TargetKind = Literal["local", "peer", "engine"]
DEFAULT_TIMEOUT_S = 120.0


class RouteTarget(Wire, frozen=True, kw_only=True):
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


class ProxyTargets(Wire, frozen=True, kw_only=True):
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
