"""The directory of nodes as pure reducers: ``apply(directory, event)`` returns the next
directory and the changes to publish. No I/O and no clock: events carry their times.

Eviction (mDNS nodes only; self and manual nodes stay until removed): every scan, a node that
neither answered as itself nor was announced since the previous scan has missed once; from
``probe_from`` misses it is probed each scan, any answer resets the count, and it is evicted
at ``evict_after`` misses. A scan that loses every one of at least two nodes at once (a network
outage on this side) counts against nobody, for up to ``mass_loss_grace`` scans in a row.

A trusted member's addresses and model lists are facts only when they come over its pinned
mutual TLS: an announcement of a member is a hint (an address to try, kept apart), an anonymous
answer in a member's name is ignored, and an address that answered over the pinned handshake
goes first (the relay dials the first). Engines come only from authenticated answers.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from msgspec.structs import replace

from backend.protocol.types.base import ManualNodeId, NodeId
from backend.protocol.types.nodes import (
    DiscoveredNode,
    NodeEngineModels,
    NodeInfo,
    NodeSource,
    NodeTelemetry,
)

SOURCE_ORDER: tuple[NodeSource, ...] = ("self", "mdns", "manual")
# Announced addresses of a member kept to try; a spoofer can announce many, so few are kept.
MAX_HINTS = 8


class EvictionPolicy(msgspec.Struct, frozen=True):
    """How many scans a node may miss before it is probed and before it is evicted."""

    probe_from: int = 3
    evict_after: int = 12
    mass_loss_grace: int = 6


DEFAULT_EVICTION = EvictionPolicy()


class Entry(msgspec.Struct, frozen=True):
    """A node plus the bookkeeping eviction needs."""

    node: DiscoveredNode
    misses: int = 0
    seen_since_scan: bool = True
    # A member's announced addresses that no pinned handshake has proved yet, newest first.
    hints: tuple[str, ...] = ()


class Directory(msgspec.Struct, frozen=True):
    """Every known node by id, and how many scans in a row lost them all."""

    entries: Mapping[NodeId, Entry] = msgspec.field(default_factory=dict)
    mass_loss_scans: int = 0

    def nodes(self) -> list[DiscoveredNode]:
        """The nodes, self first, then by name."""
        return sorted(
            (entry.node for entry in self.entries.values()),
            key=lambda node: ("self" not in node.sources, node.name.lower(), node.node_id),
        )


# Events ----------------------------------------------------------------------------------------


class Announced(msgspec.Struct, frozen=True):
    """mDNS announced (or re-announced) a PAIR node; of a trusted ``member`` only a hint."""

    node_id: NodeId
    addresses: tuple[str, ...]
    ports: Mapping[str, int]
    at: float
    member: bool = False


class InfoFetched(msgspec.Struct, frozen=True):
    """A node answered ``/v1/node-info`` as itself at ``address``.

    ``source`` adds how it is known (``None`` for a routine telemetry poll); ``addresses``
    replaces the node's addresses (self, whose answer comes over loopback). ``authenticated``:
    it came over the node's pinned mutual TLS (or from this node over loopback), so its
    address and engines count; ``member``: the node is a trusted member, whose answers count
    only when authenticated.
    """

    info: NodeInfo
    address: str
    at: float
    source: NodeSource | None = None
    manual_id: ManualNodeId | None = None
    addresses: tuple[str, ...] | None = None
    authenticated: bool = False
    member: bool = False


class EngineFound(msgspec.Struct, frozen=True):
    """A manual address answered as a bare engine (no PAIR there)."""

    manual_id: ManualNodeId
    name: str
    address: str
    port: int
    engine: str
    models: NodeEngineModels
    at: float


class FetchFailed(msgspec.Struct, frozen=True):
    """A node did not answer as itself (its telemetry poll or manual probe failed)."""

    node_id: NodeId


class SourceDropped(msgspec.Struct, frozen=True):
    """A way of knowing a node ended (a manual node removed)."""

    node_id: NodeId
    source: NodeSource


class Scanned(msgspec.Struct, frozen=True):
    """A scan tick: count misses, evict."""


Event = Announced | InfoFetched | EngineFound | FetchFailed | SourceDropped | Scanned


# Changes ---------------------------------------------------------------------------------------


class NodeJoined(msgspec.Struct, frozen=True):
    """A node entered the list."""

    node: DiscoveredNode


class NodeUpdated(msgspec.Struct, frozen=True):
    """Something other than telemetry changed."""

    node: DiscoveredNode


class NodeLeft(msgspec.Struct, frozen=True):
    """A node left the list."""

    node_id: NodeId


class NodeTelemetryChanged(msgspec.Struct, frozen=True):
    """Only telemetry or ``last_seen`` changed."""

    node_id: NodeId
    telemetry: NodeTelemetry | None
    last_seen: float | None


Change = NodeJoined | NodeUpdated | NodeLeft | NodeTelemetryChanged


def apply(
    directory: Directory, event: Event, policy: EvictionPolicy = DEFAULT_EVICTION
) -> tuple[Directory, list[Change]]:
    """The directory after ``event`` and what changed."""
    match event:
        case Scanned():
            return _scan(directory, policy)
        case Announced():
            return _announced(directory, event)
        case InfoFetched():
            return _info_fetched(directory, event)
        case EngineFound():
            return _engine_found(directory, event)
        case FetchFailed():
            return _fetch_failed(directory, event)
        case SourceDropped():
            return _source_dropped(directory, event)


def due_for_probe(directory: Directory, policy: EvictionPolicy) -> list[NodeId]:
    """mDNS nodes that have missed enough scans to be probed on this one."""
    return sorted(
        node_id
        for node_id, entry in directory.entries.items()
        if _tracked(entry) and entry.misses >= policy.probe_from
    )


def dial_order(directory: Directory, node_id: NodeId) -> list[str]:
    """Where to ask ``node_id``: its addresses (the last authenticated first), then hints."""
    entry = directory.entries.get(node_id)
    if entry is None:
        return []
    return _merge_addresses(entry.node.addresses, entry.hints)


def reduce_telemetry(info: NodeInfo) -> NodeTelemetry:
    """Utilisation figures from a node-info answer: busiest GPU, summed VRAM."""
    gpu_percents = [g.utilization_percent for g in info.gpus if g.utilization_percent is not None]
    vram_used = [g.vram_used_bytes for g in info.gpus if g.vram_used_bytes is not None]
    vram_total = [g.vram_total_bytes for g in info.gpus if g.vram_total_bytes is not None]
    return NodeTelemetry(
        valid=info.telemetry_valid,
        cpu_percent=info.cpu.utilization_percent,
        memory_used_bytes=info.memory.used_bytes,
        memory_total_bytes=info.memory.total_bytes,
        gpu_percent=max(gpu_percents) if gpu_percents else None,
        vram_used_bytes=sum(vram_used) if vram_used else None,
        vram_total_bytes=sum(vram_total) if vram_total else None,
        pending_jobs=info.pending_jobs,
        gpus=list(info.gpus) or None,
    )


# Reducers --------------------------------------------------------------------------------------


def _tracked(entry: Entry) -> bool:
    sources = entry.node.sources
    return "mdns" in sources and "self" not in sources


def _scan(directory: Directory, policy: EvictionPolicy) -> tuple[Directory, list[Change]]:
    tracked = {key: entry for key, entry in directory.entries.items() if _tracked(entry)}
    lost_all = len(tracked) >= 2 and not any(e.seen_since_scan for e in tracked.values())
    if lost_all and directory.mass_loss_scans < policy.mass_loss_grace:
        return replace(directory, mass_loss_scans=directory.mass_loss_scans + 1), []
    entries = dict(directory.entries)
    changes: list[Change] = []
    for key, entry in tracked.items():
        misses = 0 if entry.seen_since_scan else entry.misses + 1
        if misses < policy.evict_after:
            entries[key] = replace(entry, misses=misses, seen_since_scan=False)
            continue
        remaining = [source for source in entry.node.sources if source != "mdns"]
        if remaining:
            node = msgspec.structs.replace(entry.node, sources=remaining, reachable=False)
            entries[key] = Entry(node, seen_since_scan=False)
            changes.append(NodeUpdated(node))
        else:
            del entries[key]
            changes.append(NodeLeft(key))
    mass = directory.mass_loss_scans + 1 if lost_all else 0
    return Directory(entries, mass), changes


def _announced(directory: Directory, event: Announced) -> tuple[Directory, list[Change]]:
    # A node joins only once its node API answered as itself; an announcement of a known node
    # (not a member) refreshes its addresses and counts as a sign of life.
    entry = directory.entries.get(event.node_id)
    if entry is None:
        return directory, []
    if event.member:
        # Anyone can announce a member's node id: its addresses wait for a pinned handshake.
        fresh = [a for a in event.addresses if a not in entry.node.addresses]
        hints = tuple(_merge_addresses(fresh, entry.hints)[:MAX_HINTS])
        return _put(directory, replace(entry, hints=hints), [])
    node = msgspec.structs.replace(
        entry.node,
        sources=_with_source(entry.node.sources, "mdns"),
        addresses=_merge_addresses(entry.node.addresses, event.addresses),
        ports={**entry.node.ports, **event.ports},
    )
    entry = replace(entry, node=node, misses=0, seen_since_scan=True)
    return _put(directory, entry, _diff(directory.entries[event.node_id].node, node))


def _info_fetched(directory: Directory, event: InfoFetched) -> tuple[Directory, list[Change]]:
    info = event.info
    if event.member and not event.authenticated:
        return directory, []  # a member's word counts only over its pinned handshake
    entry = directory.entries.get(info.node_id)
    old = entry.node if entry is not None else None
    sources = list(old.sources) if old is not None else []
    if event.source is not None:
        sources = _with_source(sources, event.source)
    if not sources:
        return directory, []  # a poll answered for a node that left meanwhile
    node = DiscoveredNode(
        node_id=info.node_id,
        name=info.name,
        kind="pair",
        sources=sources,
        addresses=_addresses(event, old),
        ports=_pair_ports(info),
        # Absent: not told (a non-member asked); unauthenticated: anyone could have sent them.
        engines=dict(info.engines or {}) if event.authenticated else {},
        reachable=True,
        last_seen=event.at,
        version=info.version,
        cluster_id=info.cluster_id,
        manual_id=event.manual_id or (old.manual_id if old else None),
        telemetry=reduce_telemetry(info),
        system=info.os.system,
        cpu_threads=info.cpu.cores,
    )
    changes: list[Change] = [NodeJoined(node)] if old is None else _diff(old, node)
    # A handshake that succeeded makes the hints moot; until then they are still worth a try.
    hints = () if event.authenticated or entry is None else entry.hints
    return _put(directory, Entry(node, hints=hints), changes)


def _engine_found(directory: Directory, event: EngineFound) -> tuple[Directory, list[Change]]:
    entry = directory.entries.get(NodeId(event.manual_id))
    node = DiscoveredNode(
        node_id=NodeId(event.manual_id),
        name=event.name,
        kind="engine",
        sources=["manual"],
        addresses=[event.address],
        ports={event.engine: event.port},
        engines={event.engine: event.models},
        reachable=True,
        last_seen=event.at,
        manual_id=event.manual_id,
    )
    changes: list[Change] = [NodeJoined(node)] if entry is None else _diff(entry.node, node)
    return _put(directory, Entry(node), changes)


def _fetch_failed(directory: Directory, event: FetchFailed) -> tuple[Directory, list[Change]]:
    entry = directory.entries.get(event.node_id)
    if entry is None or not entry.node.reachable:
        return directory, []
    node = msgspec.structs.replace(entry.node, reachable=False)
    return _put(directory, replace(entry, node=node), [NodeUpdated(node)])


def _source_dropped(directory: Directory, event: SourceDropped) -> tuple[Directory, list[Change]]:
    entry = directory.entries.get(event.node_id)
    if entry is None or event.source not in entry.node.sources:
        return directory, []
    remaining = [source for source in entry.node.sources if source != event.source]
    entries = dict(directory.entries)
    if not remaining:
        del entries[event.node_id]
        return replace(directory, entries=entries), [NodeLeft(event.node_id)]
    manual_id = None if event.source == "manual" else entry.node.manual_id
    node = msgspec.structs.replace(entry.node, sources=remaining, manual_id=manual_id)
    entries[event.node_id] = replace(entry, node=node)
    return replace(directory, entries=entries), [NodeUpdated(node)]


# Helpers ---------------------------------------------------------------------------------------


def _put(
    directory: Directory, entry: Entry, changes: list[Change]
) -> tuple[Directory, list[Change]]:
    entries = dict(directory.entries)
    entries[entry.node.node_id] = entry
    return replace(directory, entries=entries), changes


def _diff(old: DiscoveredNode, new: DiscoveredNode) -> list[Change]:
    """``node_updated`` for real changes, ``node_telemetry`` when only the figures moved."""
    quiet = {"telemetry": None, "last_seen": None}
    if msgspec.structs.replace(old, **quiet) != msgspec.structs.replace(new, **quiet):
        return [NodeUpdated(new)]
    if old.telemetry != new.telemetry or old.last_seen != new.last_seen:
        return [NodeTelemetryChanged(new.node_id, new.telemetry, new.last_seen)]
    return []


def _with_source(sources: list[NodeSource], source: NodeSource) -> list[NodeSource]:
    present = {*sources, source}
    return [item for item in SOURCE_ORDER if item in present]


def _merge_addresses(
    first: list[str] | tuple[str, ...], rest: list[str] | tuple[str, ...]
) -> list[str]:
    return list(dict.fromkeys([*first, *rest]))


def _addresses(event: InfoFetched, old: DiscoveredNode | None) -> list[str]:
    if event.addresses is not None:
        return list(event.addresses)
    if old is not None and "self" in old.sources:
        return list(old.addresses)
    return _merge_addresses([event.address], old.addresses if old else ())


def _pair_ports(info: NodeInfo) -> dict[str, int]:
    ports = info.ports
    return {
        "node": ports.node,
        "ollama": ports.ollama,
        "openai": ports.openai,
        "llamacpp": ports.llamacpp,
        "relay": ports.relay,
    }
