"""Which nodes may serve a request and in what order; reservations that spread bursts.

Owners: the targets behind a door whose inventory lists the model (by the engine's naming rule).
Order: a manual pin (if eligible), then the scheduler's priority list, then a stable order.
Which of them goes first is placement's choice (``placement/``, docs/PLACEMENT.md), fed the
pending work and the reservations kept here: a frozen ``Reservations`` value and pure functions
over it. Reservations carry the generation of the load snapshot they were counted against, so a
release that arrives after a newer snapshot cannot drive a node's load below zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from backend.protocol.proxy import DOOR_ENGINES, AwayModels, Door, ProxyTargets, RouteTarget
from backend.workers.proxy.routing.naming import has_model

NodeId = str
# A peer's relay listener serves requests under this prefix and the door's name with its own
# engine only (no second routing hop): ``/_pair/relay/ollama/api/chat``.
RELAY_PREFIX = "/_pair/relay"
AFFINITY_CREDIT = 1.5


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What the scheduler knows about a node's load at one snapshot."""

    pending: int = 0
    gpu_pressure: int = 0


# A node the snapshot does not list.
_IDLE = NodeLoad()


def eligible(
    inventories: Mapping[NodeId, Mapping[str, list[str]]], engine: str, model: str
) -> list[NodeId]:
    """Nodes whose inventory for ``engine`` has ``model``, in stable (id) order."""
    return sorted(
        node
        for node, engines in inventories.items()
        if has_model(engine, engines.get(engine), model)
    )


def order(
    candidates: Sequence[NodeId],
    *,
    pin: NodeId | None = None,
    priority: Sequence[NodeId] = (),
) -> list[NodeId]:
    """Pin first (only if eligible), then the priority list, then the rest by id."""
    pool = set(candidates)
    ordered: list[NodeId] = []
    for node in [pin] if pin is not None else []:
        if node in pool:
            ordered.append(node)
    for node in priority:
        if node in pool and node not in ordered:
            ordered.append(node)
    ordered += sorted(pool - set(ordered))
    return ordered


class Reservations(msgspec.Struct, frozen=True, gc=False):
    """In-flight dispatches per node since the last load snapshot: a value, replaced (never
    changed) by ``with_snapshot``, ``reserved`` and ``released``."""

    generation: int = 0
    loads: Mapping[NodeId, NodeLoad] = msgspec.field(default_factory=dict)
    held: Mapping[NodeId, int] = msgspec.field(default_factory=dict)


def with_snapshot(
    table: Reservations, generation: int, loads: Mapping[NodeId, NodeLoad]
) -> Reservations:
    """A newer snapshot, with no reservations (it already counts earlier dispatches); an older
    or equal one leaves ``table`` as it is."""
    if generation <= table.generation:
        return table
    return Reservations(generation, dict(loads))


def pending_and_held(table: Reservations, node: NodeId) -> tuple[int, int]:
    """The node's pending jobs at the snapshot, and the dispatches reserved to it since."""
    return table.loads.get(node, _IDLE).pending, table.held.get(node, 0)


def score(table: Reservations, node: NodeId) -> int:
    """The node's load as the router sees it now."""
    load = table.loads.get(node, _IDLE)
    return load.pending + load.gpu_pressure + table.held.get(node, 0)


def reserved(table: Reservations, node: NodeId) -> Reservations:
    """``table`` with one more dispatch reserved to ``node``, under the same generation (the
    one to hand back to ``released``)."""
    held = dict(table.held)
    held[node] = held.get(node, 0) + 1
    return Reservations(table.generation, table.loads, held)


def released(table: Reservations, node: NodeId, generation: int) -> Reservations:
    """``table`` with a reservation given back; one taken under an older snapshot is already
    forgotten, and a node holds never fewer than none."""
    count = table.held.get(node, 0)
    if generation != table.generation or count == 0:
        return table
    held = dict(table.held)
    if count > 1:
        held[node] = count - 1
    else:
        del held[node]
    return Reservations(table.generation, table.loads, held)


def least_loaded(
    table: Reservations,
    ordered: Sequence[NodeId],
    *,
    pinned: bool = False,
    credit: Mapping[NodeId, float] | None = None,
) -> NodeId:
    """The least loaded of ``ordered`` (ties keep its order); a pin (the first) is honoured.

    ``credit`` is subtracted from a node's load before comparing (conversation affinity:
    the node that holds the chat's KV wins unless it is clearly busier).
    """
    if not ordered:
        raise ValueError("no candidate to reserve")
    if pinned:
        return ordered[0]
    bonus = credit or {}
    return min(ordered, key=lambda node: score(table, node) - bonus.get(node, 0.0))


def targets_for(targets: ProxyTargets, door: Door) -> list[RouteTarget]:
    """Every node running the engine behind ``door`` (local first, then the table's order)."""
    found = targets.engines.get(DOOR_ENGINES[door], [])
    return sorted(found, key=lambda target: target.kind != "local")


def local_target(targets: ProxyTargets, door: Door) -> RouteTarget | None:
    """This node's own engine behind ``door``, if it runs."""
    return next((t for t in targets_for(targets, door) if t.kind == "local"), None)


def owners(targets: ProxyTargets, door: Door, model: str) -> list[RouteTarget]:
    """The nodes whose inventory for the door's engine has ``model`` (by its naming rule).

    Asked several times per request of the same (immutable) table: answered from a cache
    that lives as long as the table does."""
    if _owners.table is not targets or len(_owners.found) >= _OWNERS_CACHE:
        _owners.table, _owners.found, _owners.ordered = targets, {}, {}
    found = _owners.found.get((door, model))
    if found is None:
        engine = DOOR_ENGINES[door]
        found = [t for t in targets_for(targets, door) if has_model(engine, t.models, model)]
        _owners.found[(door, model)] = found
    return list(found)


# Answers of ``owners`` for the last table (bounded: clients name any model they like).
_OWNERS_CACHE = 1024


@dataclass
class _Owners:
    table: ProxyTargets | None = None
    found: dict[tuple[Door, str], list[RouteTarget]] = field(default_factory=dict)
    ordered: dict[tuple[Door, str], list[RouteTarget]] = field(default_factory=dict)


_owners = _Owners()


def away_owner(targets: ProxyTargets, door: Door, model: str) -> AwayModels | None:
    """A member that served ``model`` behind ``door`` a short while ago and does not now."""
    engine = DOOR_ENGINES[door]
    return next(
        (a for a in targets.away if a.engine == engine and has_model(engine, a.models, model)),
        None,
    )


def vanished(targets: ProxyTargets, door: Door, model: str) -> bool:
    """Whether no node lists ``model`` behind ``door`` and no member that did is coming back."""
    return not owners(targets, door, model) and away_owner(targets, door, model) is None


def upstream_url(target: RouteTarget, path_and_query: str, door: Door) -> str:
    """The URL that serves ``path_and_query`` of ``door`` on ``target`` (a peer's relay)."""
    base = target.base_url.rstrip("/")
    if target.kind == "peer":
        return f"{base}{relay_path(door, path_and_query)}"
    return f"{base}{path_and_query}"


def relay_path(door: Door, path_and_query: str) -> str:
    """Where a peer's relay serves ``path_and_query`` of ``door``."""
    return f"{RELAY_PREFIX}/{door}{path_and_query}"


def candidates(targets: ProxyTargets, door: Door, model: str) -> list[RouteTarget]:
    """The owners of ``model`` in the order they are tried: pin, priority, this node, node id
    (kept with ``owners``' answers for the table's life)."""
    found = owners(targets, door, model)  # first: it starts a new cache for a new table
    ordered = _owners.ordered.get((door, model))
    if ordered is None:
        ordered = _owners.ordered[(door, model)] = _ordered(targets, door, found)
    return list(ordered)


def _ordered(targets: ProxyTargets, door: Door, found: list[RouteTarget]) -> list[RouteTarget]:
    engine = DOOR_ENGINES[door]
    pin = targets.pins.get(engine)
    rank = {node: index for index, node in enumerate(targets.priority)}

    def key(target: RouteTarget) -> tuple[int, int, int, str]:
        return (
            0 if target.node_id == pin else 1,
            rank.get(target.node_id, len(rank)),
            0 if target.kind == "local" else 1,
            target.node_id,
        )

    return sorted(found, key=key)
