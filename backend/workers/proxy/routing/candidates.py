"""Which nodes may serve a request and in what order; reservations that spread bursts.

Owners: every node whose inventory lists the model, whatever its engine (by that engine's naming
rule), or a replica of it: the same weights under another name, or the model a user's alias
stands for (``identity.py``); one engine per node.
Order: a manual pin (if eligible), then the scheduler's priority list, then a stable order.
Which of them goes first is placement's choice (``placement/``, docs/PLACEMENT.md), fed the
pending work and the reservations kept here: a frozen ``Reservations`` value and pure functions
over it. Reservations carry the generation of the load snapshot they were counted against, so a
release that arrives after a newer snapshot cannot drive a node's load below zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from backend.protocol.proxy import DOOR_ENGINES, AwayModels, Door, ProxyTargets, RouteTarget
from backend.workers.proxy.doors.wire import Dialect
from backend.workers.proxy.routing.identity import Identity, resolve
from backend.workers.proxy.routing.naming import has_model
from backend.workers.proxy.translate.native import speaks

NodeId = str
# A peer's relay listener serves requests under this prefix and the door's name with its own
# engine only (no second routing hop): ``/_pair/relay/ollama/api/chat``.
RELAY_PREFIX = "/_pair/relay"
AFFINITY_CREDIT = 1.5
# Which engine serves a name two engines of one node list, all else equal.
ENGINE_ORDER: tuple[str, ...] = ("llamacpp", "ollama", "lmstudio")


class NodeLoad(msgspec.Struct, frozen=True):
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


def engine_targets(targets: ProxyTargets) -> list[RouteTarget]:
    """Every engine of every node in the table, each with its ``engine`` named (local first,
    then the table's order; kept for the table's life)."""
    _renew(targets)
    return _owners.flat


def targets_for(targets: ProxyTargets, door: Door) -> list[RouteTarget]:
    """Every node running the engine a door's non-inference paths go to (local first)."""
    return targets_of(targets, DOOR_ENGINES[door])


def targets_of(targets: ProxyTargets, engine: str) -> list[RouteTarget]:
    """Every node running ``engine`` (local first, then the table's order)."""
    return [t for t in engine_targets(targets) if t.engine == engine]


def local_target(targets: ProxyTargets, engine: str) -> RouteTarget | None:
    """This node's own ``engine``, if it runs."""
    return next((t for t in targets_of(targets, engine) if t.kind == "local"), None)


def owners(targets: ProxyTargets, model: str, dialect: Dialect = "openai") -> list[RouteTarget]:
    """The nodes whose inventory has ``model`` (by each engine's naming rule) or a replica of
    it (``identity.py``), whatever the engine: one entry per node, where a node has the model
    in two engines the one that speaks ``dialect`` natively (no translation), then
    ``ENGINE_ORDER``.

    Asked several times per request of the same (immutable) table: answered from a cache
    that lives as long as the table does."""
    _renew(targets)
    found = _owners.found.get((dialect, model))
    if found is None:
        identity = resolve(targets, model)
        found = _owners.found[(dialect, model)] = _owners_of(_owners.flat, identity, dialect)
    return list(found)


def _owners_of(flat: list[RouteTarget], identity: Identity, dialect: Dialect) -> list[RouteTarget]:
    by_node: dict[str, RouteTarget] = {}
    for target in flat:
        if not identity.listed_by(target):
            continue
        kept = by_node.get(target.node_id)
        if kept is None or _preference(target, dialect) < _preference(kept, dialect):
            by_node[target.node_id] = target
    return [t for t in flat if by_node.get(t.node_id) is t]


def _preference(target: RouteTarget, dialect: Dialect) -> tuple[int, int]:
    native = 0 if speaks(target.engine, dialect) else 1
    rank = ENGINE_ORDER.index(target.engine) if target.engine in ENGINE_ORDER else len(ENGINE_ORDER)
    return native, rank


def _renew(targets: ProxyTargets) -> None:
    """Start the caches over for a table not seen last."""
    if _owners.table is targets and len(_owners.found) < _OWNERS_CACHE:
        return
    if _owners.table is not targets:
        _owners.flat = _flatten(targets)
    _owners.table, _owners.found, _owners.ordered = targets, {}, {}


def _flatten(targets: ProxyTargets) -> list[RouteTarget]:
    flat = [
        target if target.engine == engine else msgspec.structs.replace(target, engine=engine)
        for engine, found in targets.engines.items()
        for target in found
    ]
    return sorted(flat, key=lambda target: target.kind != "local")


# Answers of ``owners`` for the last table (bounded: clients name any model they like).
_OWNERS_CACHE = 1024


class _Owners(msgspec.Struct):
    table: ProxyTargets | None = None
    flat: list[RouteTarget] = msgspec.field(default_factory=list)
    found: dict[tuple[Dialect, str], list[RouteTarget]] = msgspec.field(default_factory=dict)
    ordered: dict[tuple[Dialect, str], list[RouteTarget]] = msgspec.field(default_factory=dict)


_owners = _Owners()


def away_owner(targets: ProxyTargets, model: str) -> AwayModels | None:
    """A member that served ``model`` (with any engine, or the model an alias of it stands
    for) a short while ago and does not now."""
    if not targets.away:
        return None
    wanted = resolve(targets, model).model
    return next((a for a in targets.away if has_model(a.engine, a.models, wanted)), None)


def vanished(targets: ProxyTargets, model: str) -> bool:
    """Whether no node lists ``model`` and no member that did is coming back."""
    return not owners(targets, model) and away_owner(targets, model) is None


def upstream_url(target: RouteTarget, path_and_query: str) -> str:
    """The URL that serves ``path_and_query`` with ``target``'s engine (a peer's relay)."""
    base = target.base_url.rstrip("/")
    if target.kind == "peer":
        return f"{base}{relay_path(target.engine, path_and_query)}"
    return f"{base}{path_and_query}"


def relay_path(engine: str, path_and_query: str) -> str:
    """Where a peer's relay serves ``path_and_query`` with its ``engine``."""
    return f"{RELAY_PREFIX}/{engine}{path_and_query}"


def candidates(targets: ProxyTargets, model: str, dialect: Dialect = "openai") -> list[RouteTarget]:
    """The owners of ``model`` in the order they are tried: pin, priority, this node, node id
    (kept with ``owners``' answers for the table's life)."""
    found = owners(targets, model, dialect)  # first: it starts a new cache for a new table
    ordered = _owners.ordered.get((dialect, model))
    if ordered is None:
        ordered = _owners.ordered[(dialect, model)] = _ordered(targets, found)
    return list(ordered)


def _ordered(targets: ProxyTargets, found: list[RouteTarget]) -> list[RouteTarget]:
    pins = targets.pins
    rank = {node: index for index, node in enumerate(targets.priority)}

    def key(target: RouteTarget) -> tuple[int, int, int, str]:
        return (
            0 if target.node_id == pins.get(target.engine) else 1,
            rank.get(target.node_id, len(rank)),
            0 if target.kind == "local" else 1,
            target.node_id,
        )

    return sorted(found, key=key)
