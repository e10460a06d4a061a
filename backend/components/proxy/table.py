"""The routing table the broker sends its proxy worker, from engines, discovery and jobs.

This node's running engines are ``local`` targets. Other PAIR nodes are ``peer`` targets,
reached through their front doors; until pairing brings mutual TLS a front door accepts
plaintext only from loopback, so only peers with a loopback address are routable (several
nodes on one computer). Bare engines added by address are ``engine`` targets.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from backend.components.proxy.targets import ENGINE_DOORS
from backend.protocol.proxy import DEFAULT_TIMEOUT_S, ProxyTargets, RouteTarget, TargetKind
from backend.protocol.types import DiscoveredNode

log = logging.getLogger(__name__)

HEADER_TIMEOUT_ENV = "PAIR_PROXY_HEADER_TIMEOUT_S"
FIRST_CONTENT_TIMEOUT_ENV = "PAIR_PROXY_FIRST_CONTENT_TIMEOUT_S"


@dataclass(frozen=True, slots=True)
class LocalEngine:
    """A running engine of this node: where it listens, what it lists, its slots per model."""

    base_url: str
    models: list[str]
    slots: int = 1


def node_targets(node: DiscoveredNode) -> dict[str, RouteTarget]:
    """The targets another node offers, by engine (nothing if it cannot be reached yet)."""
    if "self" in node.sources or not node.reachable:
        return {}
    kind: TargetKind
    if node.kind == "engine":
        host = node.addresses[0] if node.addresses else None
        ports = node.ports
        kind = "engine"
    else:
        host = next((a for a in node.addresses if _is_loopback(a)), None)
        ports = {engine: node.ports.get(door, 0) for engine, door in ENGINE_DOORS.items()}
        kind = "peer"
    if host is None:
        return {}
    found: dict[str, RouteTarget] = {}
    for engine, listed in node.engines.items():
        port = ports.get(engine)
        if not port:
            continue
        found[engine] = RouteTarget(
            node_id=node.node_id,
            kind=kind,
            base_url=f"http://{_host(host)}:{port}",
            name=node.name,
            models=list(listed.models or []),
        )
    return found


def build_table(
    *,
    node_id: str,
    local: Mapping[str, LocalEngine],
    nodes: Sequence[DiscoveredNode],
    loads: Mapping[str, int],
    generation: int,
    header_timeout_s: float = DEFAULT_TIMEOUT_S,
    first_content_timeout_s: float = DEFAULT_TIMEOUT_S,
    pinned: str = "",
) -> ProxyTargets:
    """This node's engines first, then every other node's by node id; ``pinned`` tried first."""
    engines: dict[str, list[RouteTarget]] = {}
    for name, engine in local.items():
        engines.setdefault(name, []).append(
            RouteTarget(
                node_id=node_id,
                kind="local",
                base_url=engine.base_url,
                models=list(engine.models),
                slots=max(engine.slots, 1),
            )
        )
    for node in sorted(nodes, key=lambda n: n.node_id):
        if node.node_id == node_id:
            continue
        for name, target in node_targets(node).items():
            engines.setdefault(name, []).append(target)
    return ProxyTargets(
        node_id=node_id,
        generation=generation,
        engines=engines,
        loads=dict(loads),
        pins=dict.fromkeys(engines, pinned) if pinned else {},
        header_timeout_s=header_timeout_s,
        first_content_timeout_s=first_content_timeout_s,
    )


class TableSource:
    """Builds the table on demand; a new load snapshot gets a new generation."""

    def __init__(
        self,
        *,
        node_id: Callable[[], str],
        local: Callable[[], Mapping[str, LocalEngine]],
        nodes: Callable[[], Sequence[DiscoveredNode]],
        loads: Callable[[], Mapping[str, int]],
        timeouts: Callable[[], tuple[float, float]],
        pinned: Callable[[], str] = str,
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._nodes = nodes
        self._loads = loads
        self._timeouts = timeouts
        self._pinned = pinned
        self._generation = 0
        self._last_loads: dict[str, int] | None = None

    def __call__(self) -> ProxyTargets:
        loads = dict(self._loads())
        if loads != self._last_loads:
            self._generation += 1
            self._last_loads = loads
        header, first_content = self._timeouts()
        return build_table(
            node_id=self._node_id(),
            local=self._local(),
            nodes=self._nodes(),
            loads=loads,
            generation=self._generation,
            header_timeout_s=header,
            first_content_timeout_s=first_content,
            pinned=self._pinned(),
        )


def merged_loads(own: Mapping[str, int], nodes: Sequence[DiscoveredNode]) -> dict[str, int]:
    """Each node's pending work: what it reports (all origins) or, if more, what we sent it."""
    loads = dict(own)
    for node in nodes:
        reported = node.telemetry.pending_jobs if node.telemetry is not None else None
        if reported is not None and "self" not in node.sources:
            loads[node.node_id] = max(loads.get(node.node_id, 0), reported)
    return loads


def timeout_from(setting: float, environment: Mapping[str, str], name: str) -> float:
    """The environment's value when it is a positive number of seconds, else the setting."""
    text = environment.get(name)
    if text is None:
        return setting
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        log.warning("%s=%r is not a positive number of seconds; using %g", name, text, setting)
        return setting
    return value


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
