"""The routing table the broker sends its proxy worker, from engines, discovery, jobs and trust.

This node's running engines are ``local`` targets. Other PAIR nodes are ``peer`` targets only
once they are trusted members of this node's cluster (paired, not provisional), and only while
their member link is up (``linked.py``): they are reached over mutual TLS at their relay port,
pinned to the certificate stored at pairing. An unpaired PAIR node is never a target, wherever
it is. Bare engines added by address are
``engine`` targets (plain HTTP, as the engine itself speaks). The table also says whether other
computers may use the front doors (``lan_access``) and, only while they may, with which keys.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType

import msgspec

from backend.common.hostport import url_host
from backend.components.cluster.members import Member, Membership
from backend.components.proxy.away import AwayMemory
from backend.components.proxy.linked import MemberInventory
from backend.components.proxy.targets import ENGINE_DOORS
from backend.protocol.proxy import (
    DEFAULT_PLACEMENT,
    DEFAULT_TIMEOUT_S,
    RELAY_IDLE_S,
    AwayModels,
    DoorKey,
    GpuSample,
    PlacementPolicy,
    ProxyTargets,
    RouteTarget,
    SlotApi,
)
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels

log = logging.getLogger(__name__)

HEADER_TIMEOUT_ENV = "PAIR_PROXY_HEADER_TIMEOUT_S"
FIRST_CONTENT_TIMEOUT_ENV = "PAIR_PROXY_FIRST_CONTENT_TIMEOUT_S"
RELAY_IDLE_TIMEOUT_ENV = "PAIR_PROXY_RELAY_IDLE_TIMEOUT_S"
# A node whose node-info names no relay port is dialled at the default one.
DEFAULT_RELAY_PORT = Ports(node=0, ollama=0, openai=0, llamacpp=0).relay
_NO_ALIASES: Mapping[str, str] = MappingProxyType({})


class LanAccess(msgspec.Struct, frozen=True):
    """Whether other computers may use the front doors, and the hashes of the keys they may use."""

    enabled: bool = False
    key_hashes: Collection[str] = ()
    origins: Collection[str] = ()  # browser origins allowed beyond loopback (a setting)
    door_keys: Mapping[str, DoorKey] = msgspec.field(default_factory=dict)  # name and scope by hash


class LocalEngine(msgspec.Struct, frozen=True):
    """A running engine of this node: where it listens, what it lists, its slots per model
    (``model_slots`` for the models the engine counts one by one, ``slots`` for the others),
    and the weights digest of each model known by one (replicas share it)."""

    base_url: str
    models: list[str]
    slots: int = 1
    model_slots: Mapping[str, int] = msgspec.field(default_factory=dict)
    resident: list[str] = msgspec.field(default_factory=list)
    single_model: bool = False
    instance: int = 0
    slot_api: SlotApi | None = None
    slots_known: bool = True
    resident_known: bool = True
    api_key: str | None = None  # the key PAIR launched it with (only PAIR reaches it)
    digests: Mapping[str, str] = msgspec.field(default_factory=dict)


def node_targets(
    node: DiscoveredNode,
    members: Mapping[str, Member] | None = None,
    linked: Collection[str] | None = None,
) -> dict[str, RouteTarget]:
    """The targets another node offers, by engine (nothing if it cannot be reached or trusted).

    A PAIR node counts only as a trusted member in ``members`` and, given ``linked`` (the
    members whose link is up), only while it is in it: then the link says whether it can be
    reached, not discovery. It is dialled at the first address discovery lists (the last that
    answered), else the address stored at pairing.
    """
    if "self" in node.sources:
        return {}
    if node.kind == "engine":
        return _engine_targets(node) if node.reachable else {}
    member = (members or {}).get(node.node_id)
    if member is None or member.provisional:
        return {}
    if not (node.node_id in linked if linked is not None else node.reachable):
        return {}
    host = node.addresses[0] if node.addresses else member.address
    if not host:
        return {}
    port = node.ports.get("relay") or DEFAULT_RELAY_PORT
    base_url = f"https://{url_host(host)}:{port}"
    return {
        engine: _peer_target(node, base_url, listed, member.cert_der)
        for engine, listed in node.engines.items()
        if engine in ENGINE_DOORS  # an engine no door serves cannot be relayed
    }


def _peer_target(
    node: DiscoveredNode, base_url: str, listed: NodeEngineModels, cert_der: bytes
) -> RouteTarget:
    """A member's engine at its relay, with what its node-info says of the engine's slots,
    resident models (placement reads them) and weights digests (replicas share one)."""
    return RouteTarget(
        node_id=node.node_id,
        kind="peer",
        base_url=base_url,
        name=node.name,
        models=list(listed.models or []),
        cert_der=cert_der,
        slots=max(listed.slots or 1, 1),
        model_slots={m: n for m, n in (listed.model_slots or {}).items() if n > 0},
        resident=list(listed.loaded or []),
        resident_known=listed.loaded is not None,
        digests=listed_digests(listed.digests, listed.models),
    )


def listed_digests(
    digests: Mapping[str, str] | None, models: Collection[str] | None
) -> dict[str, str]:
    """The digests of the models a target lists (a digest of a model it does not list would
    make it an owner of that model)."""
    if not digests or not models:
        return {}
    return {model: digests[model] for model in models if model in digests}


def gpu_samples(nodes: Sequence[DiscoveredNode]) -> dict[str, GpuSample]:
    """Each node's busiest GPU from its last valid telemetry, read when it was last seen."""
    samples: dict[str, GpuSample] = {}
    for node in nodes:
        telemetry = node.telemetry
        if telemetry is None or not telemetry.valid or telemetry.gpu_percent is None:
            continue
        if node.last_seen is None:
            continue
        samples[node.node_id] = GpuSample(percent=telemetry.gpu_percent, sampled_at=node.last_seen)
    return samples


def _engine_targets(node: DiscoveredNode) -> dict[str, RouteTarget]:
    """A bare engine added by address, dialled at its own port in plain HTTP."""
    host = node.addresses[0] if node.addresses else None
    if host is None:
        return {}
    found: dict[str, RouteTarget] = {}
    for engine, listed in node.engines.items():
        port = node.ports.get(engine)
        if not port:
            continue
        found[engine] = RouteTarget(
            node_id=node.node_id,
            kind="engine",
            base_url=f"http://{url_host(host)}:{port}",
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
    relay_idle_s: float = RELAY_IDLE_S,
    pinned: str = "",
    membership: Membership | None = None,
    lan: LanAccess | None = None,
    placement: PlacementPolicy = DEFAULT_PLACEMENT,
    linked: Collection[str] | None = None,
    aliases: Mapping[str, str] = _NO_ALIASES,
) -> ProxyTargets:
    """This node's engines first, then every other node's by node id; ``pinned`` tried first.

    Other PAIR nodes are in it only as trusted members of ``membership`` (and of ``linked``,
    when given: ``node_targets``), whose certificates are also the table's ``trusted`` list
    (the clients the relay lets in). The key hashes of ``lan`` go to the worker only while LAN
    access is on: off, it holds none. ``aliases`` are the user's model aliases (name ->
    target), passed on as they are.
    """
    lan = lan or LanAccess()
    trusted = trusted_members(membership or Membership())
    members: dict[str, Member] = {member.node_id: member for member in trusted}
    engines: dict[str, list[RouteTarget]] = {}
    for name, engine in local.items():
        engines.setdefault(name, []).append(
            RouteTarget(
                node_id=node_id,
                kind="local",
                base_url=engine.base_url,
                models=list(engine.models),
                slots=max(engine.slots, 1),
                model_slots={model: n for model, n in engine.model_slots.items() if n > 0},
                resident=list(engine.resident),
                single_model=engine.single_model,
                instance=engine.instance,
                slot_api=engine.slot_api,
                slots_known=engine.slots_known,
                resident_known=engine.resident_known,
                api_key=engine.api_key,
                digests=listed_digests(engine.digests, engine.models),
            )
        )
    for node in sorted(nodes, key=lambda n: n.node_id):
        if node.node_id == node_id:
            continue
        for name, target in node_targets(node, members, linked).items():
            engines.setdefault(name, []).append(target)
    return ProxyTargets(
        node_id=node_id,
        generation=generation,
        engines=engines,
        loads=dict(loads),
        pins=dict.fromkeys(engines, pinned) if pinned else {},
        header_timeout_s=header_timeout_s,
        first_content_timeout_s=first_content_timeout_s,
        relay_idle_s=relay_idle_s,
        trusted=sorted(member.cert_der for member in trusted),
        lan_access=lan.enabled,
        api_key_hashes=sorted(lan.key_hashes) if lan.enabled else [],
        api_keys=dict(lan.door_keys) if lan.enabled else {},
        allowed_origins=list(lan.origins),
        placement=placement,
        gpu=gpu_samples(nodes),
        aliases=dict(aliases),
    )


def trusted_members(membership: Membership) -> list[Member]:
    """The members whose pin is final and not tombstoned: the only peers, both ways."""
    return [m for m in membership.trusted() if m.fingerprint not in membership.removed]


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
        members: Callable[[], Membership] = Membership,
        lan: Callable[[], LanAccess] = LanAccess,
        placement: Callable[[], PlacementPolicy] = lambda: DEFAULT_PLACEMENT,
        clock: Callable[[], float] = time.monotonic,
        local_away: Callable[[], Sequence[AwayModels]] = tuple,
        linked: Callable[[], Collection[str]] | None = None,
        relay_idle: Callable[[], float] = lambda: RELAY_IDLE_S,
        aliases: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._nodes = nodes
        self._loads = loads
        self._timeouts = timeouts
        self._pinned = pinned
        self._members = members
        self._lan = lan
        self._placement = placement
        self._clock = clock
        self._local_away = local_away
        self._linked = linked
        self._relay_idle = relay_idle
        self._aliases = aliases
        self._inventory = MemberInventory()
        self._away = AwayMemory()
        self._generation = 0
        self._last_loads: dict[str, int] | None = None

    def __call__(self) -> ProxyTargets:
        loads = dict(self._loads())
        if loads != self._last_loads:
            self._generation += 1
            self._last_loads = loads
        header, first_content = self._timeouts()
        membership = self._members()
        members = {member.node_id for member in trusted_members(membership)}
        nodes = self._nodes()
        linked = self._linked() if self._linked is not None else None
        if linked is not None:
            nodes = self._inventory.complete(nodes, members)
        table = build_table(
            node_id=self._node_id(),
            local=self._local(),
            nodes=nodes,
            loads=loads,
            generation=self._generation,
            header_timeout_s=header,
            first_content_timeout_s=first_content,
            relay_idle_s=self._relay_idle(),
            pinned=self._pinned(),
            membership=membership,
            lan=self._lan(),
            placement=self._placement(),
            linked=linked,
            aliases=self._aliases(),
        )
        away = [*self._local_away(), *self._away.update(table.engines, members, self._clock())]
        return msgspec.structs.replace(table, away=away) if away else table


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
