"""Typed payloads of the broker's JSON-RPC surface (see docs/RPC.md)."""

from __future__ import annotations

from typing import Literal, NewType

import msgspec

# Ids that must not be mixed up: each is a plain string on the wire.
NodeId = NewType("NodeId", str)  # a PAIR node's UUID, or a manual id for an engine-only address
EngineName = NewType("EngineName", str)  # a manifest's name: ollama, lmstudio, llamacpp
JobKey = NewType("JobKey", str)  # <origin node id>/<run id>/<n>
ManualNodeId = NewType("ManualNodeId", str)  # an entry of the manual nodes list
InviteId = NewType("InviteId", str)  # a pairing invitation

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
    commit: str | None = None  # the short commit the broker was built from, when known


class ErrorAction(Wire, frozen=True, kw_only=True):
    """What the user can do about an error; ``target`` names what a retry or restart acts on."""

    kind: ErrorActionKind
    label: str
    target: str | None = None


class ServiceError(Wire, frozen=True, kw_only=True):
    """One entry of the errors registry, keyed by (``node_id``, ``id``)."""

    id: str
    node_id: NodeId
    message: str
    severity: Severity = "error"
    action: ErrorAction | None = None
    created_at: float
    updated_at: float
    engine: EngineName | None = None
    model: str | None = None


class ErrorReport(Wire, frozen=True, kw_only=True):
    """Parameters of ``errors:report``; the broker fills node and timestamps when absent."""

    id: str
    message: str
    severity: Severity = "error"
    action: ErrorAction | None = None
    node_id: NodeId | None = None
    timestamp: float | None = None
    engine: EngineName | None = None
    model: str | None = None


class ErrorClear(Wire, frozen=True, kw_only=True):
    """Parameters of ``errors:clear``."""

    id: str
    node_id: NodeId | None = None


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


class ComponentChanged(Wire, frozen=True, kw_only=True, tag_field="event", tag="component_changed"):
    """Push ``components:event``: one component's new state."""

    seq: int
    component: ComponentInfo


ComponentsEvent = ComponentChanged


class Ports(Wire, frozen=True, kw_only=True):
    """The node's listener ports as configured; ``relay`` is the mutual-TLS port paired
    computers send each other's requests to (its default lets payloads without it decode)."""

    node: int
    ollama: int
    openai: int
    llamacpp: int
    relay: int = 14321


class BrokerStatus(Wire, frozen=True, kw_only=True):
    """Answer to ``status``: what ``pair status`` prints."""

    version: str
    pid: int
    started_at: float
    uptime_ms: int
    data_dir: str
    node_id: NodeId
    node_name: str
    control_address: str
    log_file: str | None
    ports: Ports
    components: list[ComponentInfo]
    errors: list[ServiceError]
    front_doors: dict[str, str] = msgspec.field(default_factory=dict)
    fingerprint: str | None = None  # sha256: + hex of this node's certificate
    cluster_id: str | None = None
    placement: str | None = None  # the front doors' placement policy (the setting)


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

    engine: EngineName
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


class EngineRef(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters naming one engine; ``node`` is the member that runs it (absent: this node)."""

    engine: EngineName
    node: NodeId | None = None


class NodeScope(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters naming the node a question is for (absent: this node)."""

    node: NodeId | None = None


class EngineSetPort(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``engine:set-port``."""

    engine: EngineName
    port: int
    node: NodeId | None = None


class EngineActionParams(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``engine:action``."""

    engine: EngineName
    action: EngineActionName
    model: str | None = None
    node: NodeId | None = None
    # ``pull_model`` of an engine whose models are files (llama.cpp): where to download it
    # from, and the SHA-256 (hex) it must have; ``model`` is the short name it is saved as.
    url: str | None = None
    sha256: str | None = None


class EngineActionResult(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer of ``engine:action``: ``names`` for the list actions, ``ok`` for the others, and
    for a delete whether the engine was restarted to pick the change up."""

    ok: bool
    names: list[str] | None = None
    restarted: bool | None = None


class EngineModels(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:models`` and the ``engine:models-changed`` push.

    ``sizes_by_engine`` maps engine -> model -> bytes; a model whose size its engine does not
    report is absent (an older broker sends no sizes at all).
    """

    models: list[str]
    by_engine: dict[EngineName, list[str]]
    loaded_by_engine: dict[EngineName, list[str]]
    slots_by_engine: dict[EngineName, dict[str, int]]
    sizes_by_engine: dict[EngineName, dict[str, int]] = {}
    details_by_engine: dict[EngineName, dict[str, ModelDetails]] = {}


class ModelDetails(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """What a model file says about itself (llama.cpp's GGUF header); unknown values absent."""

    file: str | None = None
    architecture: str | None = None
    quantization: str | None = None
    context_length: int | None = None


class ModelQueue(Wire, frozen=True, kw_only=True):
    """One model's requests at an engine's scheduler: admitted (running) and queued."""

    model: str
    running: int = 0
    waiting: int = 0


class ExclusiveOperation(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """An operation that runs alone on a drained engine (load, unload, delete, switch, update,
    restart); ``model`` when it is about one."""

    kind: str
    model: str | None = None


class SlotOwners(Wire, frozen=True, kw_only=True):
    """Who the engine's slots were last handed to, as counts: a session PAIR can recognise,
    a keyless request (an owner nobody can prove to be), or nobody since the engine started;
    and how many conversations have their KV parked in a file until they come back."""

    sessions: int = 0
    keyless: int = 0
    fresh: int = 0
    parked: int = 0


class SchedulerState(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One local engine's scheduler (docs/SCHEDULER.md).

    ``ceiling`` is the engine's slot count, ``idle`` what the engine last reported idle (absent
    where it reports no slots). ``turn`` is the model that owns a one-model engine now;
    ``exclusive`` the operation running alone, ``exclusive_waiting`` those queued behind.
    """

    engine: EngineName
    single_model: bool = False
    ceiling: int = 1
    idle: int | None = None
    running: int = 0
    waiting: int = 0
    queues: list[ModelQueue] = []
    resident: str | None = None
    turn: str | None = None
    exclusive: ExclusiveOperation | None = None
    exclusive_waiting: int = 0
    slot_owners: SlotOwners | None = None


class SchedulerStates(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:scheduler``: every local engine's scheduler that has seen work or
    runs (an engine with none is absent)."""

    engines: list[SchedulerState]


class PullProgress(Wire, frozen=True, kw_only=True):
    """Pull progress (``engine:event`` ``pull_progress``): ``percent`` is absent for stages that
    cannot be measured."""

    engine: EngineName
    model: str
    stage: str
    percent: float | None = None
    completed: int | None = None
    total: int | None = None
    done: bool = False
    error: str | None = None


class InstallProgress(Wire, frozen=True, kw_only=True):
    """Install progress (``engine:event`` ``install_progress``; same rules as pull progress)."""

    engine: EngineName
    stage: str
    percent: float | None = None
    done: bool = False
    error: str | None = None


class EngineLogs(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:logs``."""

    engine: EngineName
    lines: list[str]


class EngineLogsQuery(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``engine:logs``: the last ``lines`` lines of one engine's output."""

    engine: EngineName
    lines: int = 200
    node: NodeId | None = None


class EngineVersions(Wire, frozen=True, kw_only=True):
    """Answer of ``engine:versions``: the installed and the latest version (None: not known),
    whether the latest is newer, whether PAIR can update the engine, and why not (or why a
    version is not known)."""

    engine: EngineName
    installed: str | None = None
    latest: str | None = None
    update_available: bool = False
    can_update: bool = False
    reason: str | None = None


class MemberEngines(Wire, frozen=True, kw_only=True):
    """Another member's engines as this node last heard them over the member link.

    ``reachable`` is False while the link is down: the rest is then the last known state
    (``engines`` empty before the link first came up).
    """

    node_id: NodeId
    name: str
    reachable: bool
    engines: list[EngineStatus] = []
    models: EngineModels | None = None
    pulls: list[PullProgress] = []
    installs: list[InstallProgress] = []
    error: str | None = None


class EnginesSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``engine:subscribe``: this node's engines, their last known models and the pulls
    and installs in progress, and every other member's (``members``); apply later
    ``engine:event`` pushes whose ``seq`` is greater."""

    seq: int
    engines: list[EngineStatus]
    models: EngineModels
    pulls: list[PullProgress] = []
    installs: list[InstallProgress] = []
    members: list[MemberEngines] = []
    scheduler: SchedulerStates | None = None


class EngineStateChanged(Wire, frozen=True, kw_only=True, tag_field="event", tag="state_changed"):
    """An engine's state, port, intent or slots changed."""

    seq: int
    status: EngineStatus


class EngineModelsChanged(Wire, frozen=True, kw_only=True, tag_field="event", tag="models_changed"):
    """The models listed or loaded by the running engines changed (also from outside PAIR)."""

    seq: int
    models: EngineModels


class PullProgressed(Wire, frozen=True, kw_only=True, tag_field="event", tag="pull_progressed"):
    """A model download moved on; exactly one per pull has ``done``."""

    seq: int
    progress: PullProgress


class InstallProgressed(
    Wire, frozen=True, kw_only=True, tag_field="event", tag="install_progressed"
):
    """An engine install moved on; exactly one per install has ``done``."""

    seq: int
    progress: InstallProgress


class MemberEnginesChanged(
    Wire, frozen=True, kw_only=True, tag_field="event", tag="member_changed"
):
    """Another member's engines, models or progress changed, or its link went up or down: its
    whole state (replace what you hold for ``node_id``)."""

    seq: int
    member: MemberEngines


class MemberEnginesLeft(Wire, frozen=True, kw_only=True, tag_field="event", tag="member_left"):
    """A node is no longer a member: forget its engines."""

    seq: int
    node_id: NodeId


class EngineSchedulerChanged(
    Wire, frozen=True, kw_only=True, tag_field="event", tag="scheduler_changed"
):
    """This node's engine schedulers changed (queues, turn, exclusive operation, slot owners);
    pushed at most 4 times a second."""

    seq: int
    scheduler: SchedulerStates


EngineEvent = (
    EngineStateChanged
    | EngineModelsChanged
    | PullProgressed
    | InstallProgressed
    | MemberEnginesChanged
    | MemberEnginesLeft
    | EngineSchedulerChanged
)


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


class NodeInfo(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """``GET /v1/node-info`` and ``nodeinfo:get``: who this node is, its hardware and services.

    ``telemetry_age_ms`` is omitted before the first sample; ``cluster_id`` while not clustered.
    ``engines`` holds running engines only, and is omitted for a client that is neither a
    trusted member (by its TLS certificate) nor this computer. ``fingerprint`` is ``sha256:`` +
    hex of the node's certificate (a hint for people comparing screens: only a pinned handshake
    proves it).
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
    """Parameters of ``node/add``: an address or hostname, the node API (or engine) port."""

    address: str
    port: int = 14320
    name: str | None = None


class ManualNodeRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``node/remove``."""

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


JobState = Literal["in_flight", "running", "completed", "failed", "cancelled"]
JobEventKind = Literal["submitted", "started", "completed", "errored"]


class JobEvent(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One numbered event of a job, sent by the proxy worker to its broker (``proxy/jobs``).

    ``key`` is ``<origin node id>/<run id>/<n>``: unique across nodes and proxy restarts.
    Every event repeats the job's header (engine, model, origin, run id, created time) so a
    broker that missed the first one can still show the job. ``seq`` counts from 1 per job.
    ``target`` is where attempt ``attempt`` was sent (None between attempts); ``node`` is the
    node whose engine started it. Times are Unix seconds.
    """

    key: JobKey
    seq: int
    kind: JobEventKind
    attempt: int
    at: float
    engine: EngineName
    model: str
    origin: NodeId
    run_id: str
    created_at: float
    path: str = ""
    target: NodeId | None = None
    node: NodeId | None = None
    error: str | None = None
    cancelled: bool = False


class JobEvents(Wire, frozen=True, kw_only=True):
    """Events of any jobs, in the order they happened (``proxy/jobs``: one per batch)."""

    events: list[JobEvent]


class Workload(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One job as ``workloads:*`` and ``pair jobs`` show it (the reducer's state, stored)."""

    key: JobKey
    engine: EngineName
    model: str
    origin: NodeId
    run_id: str
    state: JobState
    created_at: float
    seq: int
    attempt: int = 0
    path: str = ""
    target: NodeId | None = None
    serving: NodeId | None = None
    started_at: float | None = None
    completed_at: float | None = None
    error: str | None = None


class WorkloadsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``workloads:get-initial`` / ``workloads:subscribe``: newest first.

    Apply later ``workloads:event`` pushes whose ``seq`` is greater.
    """

    seq: int
    workloads: list[Workload]


class WorkloadUpserted(Wire, frozen=True, kw_only=True, tag_field="event", tag="upsert"):
    """A job appeared or changed: the whole job."""

    seq: int
    key: JobKey
    workload: Workload


class WorkloadRemoved(Wire, frozen=True, kw_only=True, tag_field="event", tag="remove"):
    """A job left the history (cleared or trimmed)."""

    seq: int
    key: JobKey


WorkloadsEvent = WorkloadUpserted | WorkloadRemoved


class WorkloadsQuery(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Parameters of ``workloads:get-initial``: at most ``limit`` jobs, newest first; with
    ``origin``, only the jobs that node received (what a member mirrors)."""

    limit: int = 200
    origin: NodeId | None = None


class Ok(Wire, frozen=True, kw_only=True):
    """An answer that only says the request was done."""

    ok: bool = True


class Unsubscribed(Wire, frozen=True, kw_only=True):
    """Answer to every ``<stream>:unsubscribe``."""

    subscribed: bool = False


class Removed(Wire, frozen=True, kw_only=True):
    """Answer to ``node/remove``."""

    removed: bool = True


class Cleared(Wire, frozen=True, kw_only=True):
    """Answer to ``workloads:clear``: how many finished jobs were removed."""

    cleared: int


InviteState = Literal[
    "pending",
    "paired",
    "wrong-pin",
    "declined",
    "canceled",
    "expired",
    "rejected",
    "busy",
    "locked-out",
    "failed",
]
InviteDirection = Literal["outgoing", "incoming"]


class Invite(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One pairing attempt as either side sees it; ``reason`` says in words how it ended.

    ``outgoing``: this node invited ``peer`` and shows the PIN. ``incoming``: ``peer`` invited
    this node; the user types the PIN here (``cluster:accept``). Times are Unix seconds.
    """

    id: InviteId
    direction: InviteDirection
    peer_node_id: NodeId
    peer_name: str
    peer_address: str
    peer_fingerprint: str
    created_at: float
    expires_at: float
    state: InviteState
    reason: str | None = None


class InviteCreated(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:invite``: the invite and the PIN to show (the only time it is sent)."""

    invite: Invite
    pin: str


class InviteParams(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:invite``: the other computer's address (or hostname) and port."""

    address: str
    port: int = 14320


class InviteRef(Wire, frozen=True, kw_only=True):
    """Parameters naming one invite (``cluster:decline``, ``cluster:cancel``)."""

    id: InviteId


class InviteAnswer(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:accept``: the invite and the six digits the user typed."""

    id: InviteId
    pin: str


class ClusterMember(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A member of this node's cluster as ``cluster:status`` shows it."""

    node_id: NodeId
    name: str
    fingerprint: str
    address: str
    node_port: int
    added_by: NodeId
    added_at: float
    state: Literal["online", "offline", "provisional"] = "offline"


class ClusterStatus(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer to ``cluster:status``: this node's identity, its cluster and the open invites."""

    node_id: NodeId
    fingerprint: str
    key_protection: Literal["keyring", "file"]
    cluster_id: str | None = None
    cluster_name: str = ""
    members: list[ClusterMember] = []
    invites: list[Invite] = []
    removed: RemovedFromCluster | None = None  # another member removed this node


class NodeProbe(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer to ``cluster:probe``: the public node-info of the PAIR node at an address, and
    whether this node can invite it (``reason`` says why not)."""

    info: NodeInfo
    invitable: bool
    reason: str | None = None


class ClusterSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:subscribe``: apply later ``cluster:event`` pushes after ``seq``."""

    seq: int
    status: ClusterStatus


class InviteChanged(Wire, frozen=True, kw_only=True, tag_field="event", tag="invite_changed"):
    """An invite appeared or moved on (received, paired, expired, ...)."""

    seq: int
    invite: Invite


class MembershipChanged(
    Wire, frozen=True, kw_only=True, tag_field="event", tag="membership_changed"
):
    """The cluster, its members or this node's trust changed: the whole new status."""

    seq: int
    status: ClusterStatus


ClusterEvent = InviteChanged | MembershipChanged


class MemberRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:remove``: the member to remove."""

    node_id: NodeId


class MemberRemoved(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:remove``: who is out, for good (its certificate is tombstoned)."""

    node_id: NodeId
    name: str
    fingerprint: str
    removed_at: float


class ClusterLeft(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:leave``: the cluster left, and which members heard it in time."""

    cluster_id: str
    told: list[NodeId] = []
    not_told: list[NodeId] = []


class ClusterRename(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:rename``: 1-64 printable characters (trimmed)."""

    name: str


class RemovedFromCluster(Wire, frozen=True, kw_only=True):
    """In ``ClusterStatus``: another member removed this node from its cluster (by whom, when).

    Kept until this node joins a cluster again; it can join only with a new identity, because
    the members keep its certificate tombstoned.
    """

    cluster_id: str
    cluster_name: str
    by: NodeId
    by_name: str
    at: float


# LAN API keys (``apikeys:*``) -----------------------------------------------------------------

ApiKeyId = NewType("ApiKeyId", str)  # a LAN API key's public id (never part of its secret)


class ApiKeyInfo(Wire, frozen=True, kw_only=True):
    """A LAN API key as listed: never its secret, only a short public prefix to recognise it."""

    id: ApiKeyId
    name: str
    prefix: str  # the first characters of the secret (``pair-AbCd``)
    created_at: float
    last_used_at: float | None = None


class ApiKeyCreate(Wire, frozen=True, kw_only=True):
    """Parameters of ``apikeys:create``: a name of 1-64 printable characters (trimmed)."""

    name: str


class ApiKeyCreated(Wire, frozen=True, kw_only=True):
    """Answer to ``apikeys:create``: the key and its secret, the only time it is sent."""

    key: ApiKeyInfo
    secret: str

    def __repr__(self) -> str:
        # Never print the secret, whatever logs or tracebacks show this answer.
        return f"ApiKeyCreated(key={self.key!r}, secret=<hidden>)"


class ApiKeyRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``apikeys:revoke``: the key to revoke."""

    id: ApiKeyId
