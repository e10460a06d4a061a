"""Nodes: node info and telemetry, the discovery list and its events, manual nodes."""

from __future__ import annotations

from typing import Literal

from backend.protocol.types.base import ManualNodeId, NodeId, Wire
from backend.protocol.types.broker import Ports


class NodeOs(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """The node's operating system; a value the platform does not report is omitted."""

    system: str | None = None
    release: str | None = None
    machine: str | None = None


class NodeCpu(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """The node's CPU; unreadable values are omitted, never reported as zero."""

    name: str | None = None
    cores: int | None = None
    utilization_percent: float | None = None


class NodeMemory(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """The node's memory; ``used_bytes`` is what applications cannot have (total - available)."""

    total_bytes: int | None = None
    used_bytes: int | None = None


class NodeGpu(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One GPU; unreadable values are omitted (a unified-memory GPU may have no VRAM figures)."""

    vendor: Literal["nvidia", "amd"]
    name: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    utilization_percent: float | None = None


class NodeEngineModels(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A running engine's models from its last good lists; omitted until first listed.

    ``slots`` is how many requests the engine runs at once per model and ``model_slots`` the
    per-model exceptions (placement reads them: a peer's free slots); absent when unknown.
    """

    models: list[str] | None = None
    loaded: list[str] | None = None
    slots: int | None = None
    model_slots: dict[str, int] | None = None
    # model -> ``sha256:<hex>`` of its weights (replicas of one model share it), and model ->
    # bytes on disk; models not known are absent.
    digests: dict[str, str] | None = None
    sizes: dict[str, int] | None = None


class NodeInfo(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """``GET /v1/node-info`` and ``nodeinfo:get``: who this node is, its hardware and services.

    ``telemetry_age_ms`` is omitted before the first sample; ``cluster_id`` while not clustered.
    ``engines`` holds running engines only. A client that is neither a trusted member (by its
    TLS certificate) nor this computer gets no ``engines`` and blank figures (``os``, ``cpu``,
    ``memory`` empty, no ``gpus`` nor ``pending_jobs``, ``telemetry_valid`` false).
    ``fingerprint`` is ``sha256:`` + hex of the node's certificate (a hint for people comparing
    screens: only a pinned handshake proves it).
    """

    node_id: NodeId
    name: str
    version: str
    os: NodeOs
    cpu: NodeCpu
    memory: NodeMemory
    gpus: list[NodeGpu]
    telemetry_valid: bool
    telemetry_age_ms: int | None = None
    cluster_id: str | None = None
    ports: Ports
    engines: dict[str, NodeEngineModels] | None = None
    pending_jobs: int | None = None
    fingerprint: str | None = None


NodeSource = Literal["self", "mdns", "manual"]
NodeKind = Literal["pair", "engine"]
ManualNodeState = Literal["probing", "pair", "engine", "unreachable"]
DiscoveryEventName = Literal["node_joined", "node_updated", "node_left", "node_telemetry"]


class NodeTelemetry(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A peer's utilisation reduced from its node-info; unreadable values are omitted."""

    valid: bool
    cpu_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    gpu_percent: float | None = None
    vram_used_bytes: int | None = None
    vram_total_bytes: int | None = None
    pending_jobs: int | None = None
    gpus: list[NodeGpu] | None = None  # each GPU's figures; the sums above are for placement


class DiscoveredNode(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One node in the discovery list: a PAIR node (keyed by its UUID) or an engine-only address.

    ``sources`` says how it is known (``self``, ``mdns``, ``manual``); ``addresses`` are in the
    order to dial, the last one that answered first; ``ports`` holds the node API (``node``) and
    front doors (PAIR) or the engine's port (engine-only); ``last_seen`` is Unix time.
    """

    node_id: NodeId
    name: str
    kind: NodeKind
    sources: list[NodeSource]
    addresses: list[str]
    ports: dict[str, int]
    engines: dict[str, NodeEngineModels]
    reachable: bool
    last_seen: float | None = None
    version: str | None = None
    cluster_id: str | None = None
    manual_id: ManualNodeId | None = None
    telemetry: NodeTelemetry | None = None
    system: str | None = None  # the operating system's name (``Linux``), as node-info says
    cpu_threads: int | None = None


class DiscoverySnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``discovery:subscribe``: apply later ``discovery:event`` pushes after ``seq``."""

    seq: int
    nodes: list[DiscoveredNode]


class NodeJoined(Wire, frozen=True, kw_only=True, tag_field="event", tag="node_joined"):
    """A node joined the list."""

    seq: int
    node_id: NodeId
    node: DiscoveredNode


class NodeUpdated(Wire, frozen=True, kw_only=True, tag_field="event", tag="node_updated"):
    """Something other than telemetry changed about a node."""

    seq: int
    node_id: NodeId
    node: DiscoveredNode


class NodeLeft(Wire, frozen=True, kw_only=True, tag_field="event", tag="node_left"):
    """A node left the list (evicted, or a manual node removed)."""

    seq: int
    node_id: NodeId


class NodeTelemetryChanged(
    Wire, frozen=True, kw_only=True, omit_defaults=True, tag_field="event", tag="node_telemetry"
):
    """Only a node's telemetry and last-seen time changed."""

    seq: int
    node_id: NodeId
    telemetry: NodeTelemetry | None = None
    last_seen: float | None = None


DiscoveryEvent = NodeJoined | NodeUpdated | NodeLeft | NodeTelemetryChanged


class ManualNodeAdd(Wire, frozen=True, kw_only=True):
    """Parameters of ``nodes:add``: an address or hostname, the node API (or engine) port."""

    address: str
    port: int = 14320
    name: str | None = None


class ManualNodeRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``nodes:remove``."""

    id: ManualNodeId


class ManualNode(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A node added by address: what its last probes found.

    ``node_id`` is the PAIR node's UUID, or the manual id for an engine-only address.
    """

    id: ManualNodeId
    address: str
    port: int
    name: str | None = None
    added_at: float
    state: ManualNodeState
    node_id: NodeId | None = None
    failures: int = 0
    last_error: str | None = None
    last_seen: float | None = None
