"""Typed payloads of the broker's JSON-RPC surface (see docs/RPC.md)."""

from __future__ import annotations

from typing import Literal

import msgspec

LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
Severity = Literal["info", "warning", "error"]
ErrorActionKind = Literal["retry", "dismiss", "restart-component", "open-settings"]
ComponentKind = Literal["task", "worker"]
ComponentStatus = Literal["starting", "running", "backoff", "failed", "stopped"]
SettingType = Literal["bool", "int", "float", "string", "enum"]
SettingValue = bool | int | float | str


class Wire(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """Base of every wire payload: immutable, keyword-only."""


class PingResult(Wire, frozen=True, kw_only=True):
    """Answer to ``ping``."""

    pong: bool
    version: str
    uptime_ms: int


class VersionInfo(Wire, frozen=True, kw_only=True):
    """Answer to ``version``."""

    version: str
    protocol: int
    python: str
    platform: str


class ErrorAction(Wire, frozen=True, kw_only=True):
    """What the user can do about an error; ``target`` names what a retry or restart acts on."""

    kind: ErrorActionKind
    label: str
    target: str | None = None


class ServiceError(Wire, frozen=True, kw_only=True):
    """One entry of the errors registry, keyed by (``node_id``, ``id``)."""

    id: str
    node_id: str
    message: str
    severity: Severity = "error"
    action: ErrorAction | None = None
    created_at: float
    updated_at: float
    engine: str | None = None
    model: str | None = None


class ErrorReport(Wire, frozen=True, kw_only=True):
    """Parameters of ``errors:report``; the broker fills node and timestamps when absent."""

    id: str
    message: str
    severity: Severity = "error"
    action: ErrorAction | None = None
    node_id: str | None = None
    timestamp: float | None = None
    engine: str | None = None
    model: str | None = None


class ErrorClear(Wire, frozen=True, kw_only=True):
    """Parameters of ``errors:clear``."""

    id: str
    node_id: str | None = None


class ComponentInfo(Wire, frozen=True, kw_only=True):
    """A supervised component or worker as the supervisor sees it now."""

    name: str
    kind: ComponentKind
    status: ComponentStatus
    restarts: int = 0
    last_error: str | None = None
    next_restart_at: float | None = None
    pid: int | None = None
    since: float


class ComponentsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``components:subscribe``: apply later events whose ``seq`` is greater."""

    seq: int
    components: list[ComponentInfo]


class ComponentChanged(Wire, frozen=True, kw_only=True):
    """Push ``components:event``: one component's new state."""

    seq: int
    event: Literal["component_changed"] = "component_changed"
    component: ComponentInfo


class Ports(Wire, frozen=True, kw_only=True):
    """The node's listener ports as configured."""

    node: int
    ollama: int
    openai: int
    llamacpp: int


class BrokerStatus(Wire, frozen=True, kw_only=True):
    """Answer to ``status``: what ``pair status`` prints."""

    version: str
    pid: int
    started_at: float
    uptime_ms: int
    data_dir: str
    node_id: str
    node_name: str
    control_address: str
    log_file: str | None
    ports: Ports
    components: list[ComponentInfo]
    errors: list[ServiceError]
    front_doors: dict[str, str] = msgspec.field(default_factory=dict)


class SettingSpec(Wire, frozen=True, kw_only=True):
    """One entry of the settings schema."""

    key: str
    type: SettingType
    default: SettingValue
    description: str
    choices: list[str] | None = None
    minimum: float | None = None
    maximum: float | None = None


class SettingsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``settings/get`` and ``settings/set``; also the ``settings:changed`` push."""

    values: dict[str, SettingValue]
    schema: list[SettingSpec]


class SettingsUpdate(Wire, frozen=True, kw_only=True):
    """Parameters of ``settings/set``: only the keys to change."""

    values: dict[str, SettingValue]


class LogLevelParams(Wire, frozen=True, kw_only=True):
    """Parameters and answer of ``log/set-level``."""

    level: LogLevel


class ComponentRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``components:restart``."""

    name: str


class AppReady(Wire, frozen=True, kw_only=True):
    """Push ``app:ready``: the broker's components are started."""

    version: str
    node_name: str
    pid: int


EngineState = Literal["not-installed", "stopped", "starting", "running", "stopping", "error"]
EngineActionName = Literal[
    "list_models", "loaded_models", "pull_model", "load_model", "unload_model", "delete_model"
]


class EngineStatus(Wire, frozen=True, kw_only=True):
    """One engine on this node: installation, process state, ports, intent and slots."""

    engine: str
    display_name: str
    front_door: str
    mode: Literal["process", "command"]
    installed: bool
    binary: str | None = None
    state: EngineState
    adopted: bool = False
    pid: int | None = None
    port: int
    default_port: int
    desired: bool | None = None
    revision: int = 0
    error: str | None = None
    slots: int | None = None


class EngineRef(Wire, frozen=True, kw_only=True):
    """Parameters naming one engine."""

    engine: str


class EngineSetPort(Wire, frozen=True, kw_only=True):
    """Parameters of ``engine:set-port``."""

    engine: str
    port: int


class EngineActionParams(Wire, frozen=True, kw_only=True):
    """Parameters of ``engine:action``."""

    engine: str
    action: EngineActionName
    model: str | None = None


class EngineModels(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:models`` and the ``engine:models-changed`` push.

    ``sizes_by_engine`` maps engine -> model -> bytes; a model whose size its engine does not
    report is absent (an older broker sends no sizes at all).
    """

    models: list[str]
    by_engine: dict[str, list[str]]
    loaded_by_engine: dict[str, list[str]]
    slots_by_engine: dict[str, dict[str, int]]
    sizes_by_engine: dict[str, dict[str, int]] = {}


class PullProgress(Wire, frozen=True, kw_only=True):
    """Push ``engine:pull-progress``: ``percent`` is absent for stages that cannot be measured."""

    engine: str
    model: str
    stage: str
    percent: float | None = None
    completed: int | None = None
    total: int | None = None
    done: bool = False
    error: str | None = None


class InstallProgress(Wire, frozen=True, kw_only=True):
    """Push ``engine:install-progress`` (same rules as pull progress)."""

    engine: str
    stage: str
    percent: float | None = None
    done: bool = False
    error: str | None = None


class EngineLogs(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:logs``."""

    engine: str
    lines: list[str]


class EngineQuery(Wire, frozen=True, kw_only=True):
    """Parameters of ``engine:status`` and ``engine:logs``: one engine, or all when absent."""

    engine: str | None = None
    lines: int = 200


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
    """A running engine's models from its last good lists; omitted until first listed."""

    models: list[str] | None = None
    loaded: list[str] | None = None


class NodeInfo(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """``GET /v1/node-info`` and ``nodeinfo:get``: who this node is, its hardware and services.

    ``telemetry_age_ms`` is omitted before the first sample; ``cluster_id`` while not clustered.
    ``engines`` holds running engines only.
    """

    node_id: str
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
    engines: dict[str, NodeEngineModels]
    pending_jobs: int | None = None


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


class DiscoveredNode(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One node in the discovery list: a PAIR node (keyed by its UUID) or an engine-only address.

    ``sources`` says how it is known (``self``, ``mdns``, ``manual``); ``addresses`` are in the
    order to dial, the last one that answered first; ``ports`` holds the node API (``node``) and
    front doors (PAIR) or the engine's port (engine-only); ``last_seen`` is Unix time.
    """

    node_id: str
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
    manual_id: str | None = None
    telemetry: NodeTelemetry | None = None


class DiscoverySnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``discovery:subscribe``: apply later ``discovery:event`` pushes after ``seq``."""

    seq: int
    nodes: list[DiscoveredNode]


class DiscoveryEvent(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Push ``discovery:event``: ``node`` for joined/updated, ``telemetry`` for telemetry."""

    seq: int
    event: DiscoveryEventName
    node_id: str
    node: DiscoveredNode | None = None
    telemetry: NodeTelemetry | None = None
    last_seen: float | None = None


class ManualNodeAdd(Wire, frozen=True, kw_only=True):
    """Parameters of ``node/add``: an address or hostname, the node API (or engine) port."""

    address: str
    port: int = 14320
    name: str | None = None


class ManualNodeRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``node/remove``."""

    id: str


class ManualNode(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A node added by address: what its last probes found.

    ``node_id`` is the PAIR node's UUID, or the manual id for an engine-only address.
    """

    id: str
    address: str
    port: int
    name: str | None = None
    added_at: float
    state: ManualNodeState
    node_id: str | None = None
    failures: int = 0
    last_error: str | None = None
    last_seen: float | None = None


JobState = Literal["in_flight", "running", "completed", "failed", "cancelled"]
JobEventKind = Literal["submitted", "started", "completed", "errored"]


class JobEvent(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One numbered event of a job, sent by the proxy worker to its broker (``proxy/job``).

    ``key`` is ``<origin node id>/<run id>/<n>``: unique across nodes and proxy restarts.
    Every event repeats the job's header (engine, model, origin, run id, created time) so a
    broker that missed the first one can still show the job. ``seq`` counts from 1 per job.
    ``target`` is where attempt ``attempt`` was sent (None between attempts); ``node`` is the
    node whose engine started it. Times are Unix seconds.
    """

    key: str
    seq: int
    kind: JobEventKind
    attempt: int
    at: float
    engine: str
    model: str
    origin: str
    run_id: str
    created_at: float
    path: str = ""
    target: str | None = None
    node: str | None = None
    error: str | None = None
    cancelled: bool = False


class Workload(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One job as ``workloads:*`` and ``pair jobs`` show it (the reducer's state, stored)."""

    key: str
    engine: str
    model: str
    origin: str
    run_id: str
    state: JobState
    created_at: float
    seq: int
    attempt: int = 0
    path: str = ""
    target: str | None = None
    serving: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    error: str | None = None


class WorkloadsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``workloads:get-initial`` / ``workloads:subscribe``: newest first.

    Apply later ``workloads:event`` pushes whose ``seq`` is greater.
    """

    seq: int
    workloads: list[Workload]


class WorkloadsEvent(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Push ``workloads:event``: ``upsert`` carries the job; ``remove`` only its key."""

    seq: int
    event: Literal["upsert", "remove"]
    key: str
    workload: Workload | None = None


class WorkloadsQuery(Wire, frozen=True, kw_only=True):
    """Parameters of ``workloads:get-initial``: at most ``limit`` jobs, newest first."""

    limit: int = 200
