"""The broker's client surface, declared once: every method with its params and result type, every
push with its payload type (see ``contract.py``; documented in docs/RPC.md)."""

from __future__ import annotations

from typing import Any, Final

from backend.protocol.contract import Method, NoParams, Push
from backend.protocol.types.aliases import AliasRef, AliasSet, ModelAlias
from backend.protocol.types.apikeys import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyRef
from backend.protocol.types.broker import (
    AppReady,
    BrokerStatus,
    ComponentInfo,
    ComponentRef,
    ComponentsEvent,
    ComponentsSnapshot,
    ErrorClear,
    ErrorReport,
    LogLevelParams,
    PingResult,
    ServiceError,
    VersionInfo,
)
from backend.protocol.types.cluster import (
    ClusterEvent,
    ClusterLeft,
    ClusterRename,
    ClusterSnapshot,
    ClusterStatus,
    Invite,
    InviteAnswer,
    InviteCreated,
    InviteParams,
    InviteRef,
    JoinWindowParams,
    JoinWindowState,
    MemberRef,
    MemberRemoved,
    NodeProbe,
)
from backend.protocol.types.engines import (
    EngineActionParams,
    EngineActionResult,
    EngineEvent,
    EngineLogs,
    EngineLogsQuery,
    EngineModels,
    EngineRef,
    EngineSetPort,
    EnginesSnapshot,
    EngineStatus,
    EngineVersions,
    NodeScope,
)
from backend.protocol.types.hub import HubFiles, HubModels, HubQuery, HubRepoQuery
from backend.protocol.types.jobs import JobDetails, JobRef, JobsEvent, JobsQuery, JobsSnapshot
from backend.protocol.types.nodes import (
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    ManualNode,
    ManualNodeAdd,
    ManualNodeRef,
    NodeInfo,
)
from backend.protocol.types.replicas import ReplicasStatus
from backend.protocol.types.results import Cleared, Ok, Removed, Unsubscribed
from backend.protocol.types.scheduler import SchedulerStates
from backend.protocol.types.settings import SettingsSnapshot, SettingsUpdate

# Broker ---------------------------------------------------------------------------------------
PING: Final = Method("ping", NoParams, PingResult, "liveness and uptime")
VERSION: Final = Method("version", NoParams, VersionInfo, "versions of PAIR, protocol, Python")
SHUTDOWN: Final = Method("shutdown", NoParams, Ok, "staged shutdown after the answer is sent")
STATUS: Final = Method("status", NoParams, BrokerStatus, "what `pair status` prints")
LOG_SET_LEVEL: Final = Method(
    "log:set-level",
    LogLevelParams,
    LogLevelParams,
    "the log level, saved as a setting",
    former="log/set-level",
)

COMPONENTS_SUBSCRIBE: Final = Method(
    "components:subscribe", NoParams, ComponentsSnapshot, "components, then numbered events"
)
COMPONENTS_UNSUBSCRIBE: Final = Method(
    "components:unsubscribe", NoParams, Unsubscribed, "stop components:event pushes"
)
COMPONENTS_RESTART: Final = Method(
    "components:restart", ComponentRef, ComponentInfo, "restart a component or worker"
)

# Errors and settings --------------------------------------------------------------------------
ERRORS_GET_INITIAL: Final = Method(
    "errors:get-initial", NoParams, list[ServiceError], "every open error"
)
ERRORS_REPORT: Final = Method("errors:report", ErrorReport, type(None), "raise or update an error")
ERRORS_CLEAR: Final = Method("errors:clear", ErrorClear, type(None), "dismiss an error")

SETTINGS_GET: Final = Method(
    "settings:get", NoParams, SettingsSnapshot, "values and schema", former="settings/get"
)
SETTINGS_SET: Final = Method(
    "settings:set",
    SettingsUpdate,
    SettingsSnapshot,
    "change settings, all or nothing",
    former="settings/set",
)

# Engines --------------------------------------------------------------------------------------
ENGINE_GET_INSTALLED: Final = Method(
    "engine:get-installed", NodeScope, list[EngineStatus], "detect again; the installed engines"
)
ENGINE_LIST: Final = Method("engine:list", NodeScope, list[EngineStatus], "every engine")
ENGINE_STATUS: Final = Method("engine:status", EngineRef, EngineStatus, "one engine")
ENGINE_SUBSCRIBE: Final = Method(
    "engine:subscribe", NoParams, EnginesSnapshot, "engines, models, progress; then events"
)
ENGINE_UNSUBSCRIBE: Final = Method(
    "engine:unsubscribe", NoParams, Unsubscribed, "stop engine:event pushes"
)
ENGINE_INSTALL: Final = Method("engine:install", EngineRef, EngineStatus, "download, install")
ENGINE_UNINSTALL: Final = Method(
    "engine:uninstall", EngineRef, EngineStatus, "remove what PAIR installed"
)
ENGINE_START: Final = Method("engine:start", EngineRef, EngineStatus, "start or adopt")
ENGINE_STOP: Final = Method("engine:stop", EngineRef, EngineStatus, "stop an owned engine")
ENGINE_RESTART: Final = Method("engine:restart", EngineRef, EngineStatus, "stop and start")
ENGINE_SET_PORT: Final = Method("engine:set-port", EngineSetPort, EngineStatus, "move an engine")
ENGINE_ACTION: Final = Method(
    "engine:action", EngineActionParams, EngineActionResult, "list, pull, load, eject, delete"
)
ENGINE_MODELS: Final = Method(
    "engine:models", NodeScope, EngineModels, "list every running engine's models now"
)
ENGINE_LOGS: Final = Method("engine:logs", EngineLogsQuery, EngineLogs, "an engine's output")
ENGINE_VERSIONS: Final = Method(
    "engine:versions", EngineRef, EngineVersions, "installed and latest version, updatable?"
)
ENGINE_UPDATE: Final = Method(
    "engine:update", EngineRef, EngineStatus, "install the latest version PAIR can get"
)
ENGINE_SCHEDULER: Final = Method(
    "engine:scheduler", NodeScope, SchedulerStates, "queues, turns and slot owners per engine"
)
ENGINE_PREPARE_SHUTDOWN: Final = Method(
    "engine:prepare-shutdown", NoParams, Ok, "stop owned engines, keep the intent"
)

NODEINFO_GET: Final = Method("nodeinfo:get", NoParams, NodeInfo, "this node's node-info")

# Discovery: found and manual nodes ------------------------------------------------------------
DISCOVERY_GET_NODES: Final = Method(
    "discovery:get-nodes", NoParams, list[DiscoveredNode], "known nodes, self first"
)
DISCOVERY_SUBSCRIBE: Final = Method(
    "discovery:subscribe", NoParams, DiscoverySnapshot, "nodes, then numbered events"
)
DISCOVERY_UNSUBSCRIBE: Final = Method(
    "discovery:unsubscribe", NoParams, Unsubscribed, "stop discovery:event pushes"
)
NODE_ADD: Final = Method(
    "nodes:add", ManualNodeAdd, ManualNode, "add a node by address", former="node/add"
)
NODE_REMOVE: Final = Method(
    "nodes:remove", ManualNodeRef, Removed, "remove a manual node", former="node/remove"
)
NODES_LIST: Final = Method(
    "nodes:list", NoParams, list[ManualNode], "manual nodes", former="nodes/list"
)

# Jobs seen by this node's front doors ---------------------------------------------------------
JOBS_GET_INITIAL: Final = Method(
    "jobs:get-initial",
    JobsQuery,
    JobsSnapshot,
    "newest jobs",
    former="workloads:get-initial",
)
JOBS_SUBSCRIBE: Final = Method(
    "jobs:subscribe",
    JobsQuery,
    JobsSnapshot,
    "jobs, then numbered events",
    former="workloads:subscribe",
)
JOBS_UNSUBSCRIBE: Final = Method(
    "jobs:unsubscribe",
    NoParams,
    Unsubscribed,
    "stop jobs:event pushes",
    former="workloads:unsubscribe",
)
JOBS_CLEAR: Final = Method(
    "jobs:clear", NoParams, Cleared, "drop finished jobs", former="workloads:clear"
)
JOBS_GET: Final = Method("jobs:get", JobRef, JobDetails, "one job and its timeline")

# Cluster: pairing and membership ---------------------------------------------------------------
CLUSTER_STATUS: Final = Method(
    "cluster:status", NoParams, ClusterStatus, "identity, cluster, members, open invites"
)
CLUSTER_SUBSCRIBE: Final = Method(
    "cluster:subscribe", NoParams, ClusterSnapshot, "cluster status, then numbered events"
)
CLUSTER_UNSUBSCRIBE: Final = Method(
    "cluster:unsubscribe", NoParams, Unsubscribed, "stop cluster:event pushes"
)
CLUSTER_PROBE: Final = Method(
    "cluster:probe", InviteParams, NodeProbe, "who answers at an address; can it be invited"
)
CLUSTER_INVITE: Final = Method(
    "cluster:invite", InviteParams, InviteCreated, "invite a computer; the PIN to show"
)
CLUSTER_ACCEPT: Final = Method(
    "cluster:accept", InviteAnswer, Invite, "answer a received invite with the PIN"
)
CLUSTER_DECLINE: Final = Method("cluster:decline", InviteRef, Invite, "decline a received invite")
CLUSTER_CANCEL: Final = Method("cluster:cancel", InviteRef, Invite, "cancel a sent invite")
CLUSTER_REMOVE: Final = Method(
    "cluster:remove", MemberRef, MemberRemoved, "remove a member for good"
)
CLUSTER_LEAVE: Final = Method("cluster:leave", NoParams, ClusterLeft, "leave the cluster")
CLUSTER_RENAME: Final = Method("cluster:rename", ClusterRename, ClusterStatus, "rename the cluster")
CLUSTER_OPEN_JOIN_WINDOW: Final = Method(
    "cluster:open-join-window",
    JoinWindowParams,
    JoinWindowState,
    "accept invites from other computers for a few minutes",
)
CLUSTER_CLOSE_JOIN_WINDOW: Final = Method(
    "cluster:close-join-window", NoParams, JoinWindowState, "stop accepting invites"
)

# LAN API keys: who may use the front doors from another computer ------------------------------
APIKEYS_CREATE: Final = Method(
    "apikeys:create", ApiKeyCreate, ApiKeyCreated, "a new LAN API key; its secret, shown once"
)
APIKEYS_LIST: Final = Method("apikeys:list", NoParams, list[ApiKeyInfo], "LAN API keys, no secrets")
APIKEYS_REVOKE: Final = Method("apikeys:revoke", ApiKeyRef, ApiKeyInfo, "revoke a LAN API key")

# Model aliases: other names for a model at this computer's front doors ---------------------------
MODELS_ALIASES: Final = Method(
    "models:aliases", NoParams, list[ModelAlias], "this computer's model aliases, by name"
)
MODELS_ALIAS_SET: Final = Method(
    "models:alias-set", AliasSet, ModelAlias, "let a name reach a model (no chains)"
)
MODELS_ALIAS_REMOVE: Final = Method(
    "models:alias-remove", AliasRef, ModelAlias, "forget a model alias"
)
REPLICAS_STATUS: Final = Method(
    "replicas:status",
    NoParams,
    ReplicasStatus,
    "the replica planner: its mode, limits and the replicas it manages (docs/REPLICAS.md)",
)

# Hugging Face: GGUF models to pull into llama.cpp ------------------------------------------------
HUB_SEARCH: Final = Method(
    "hub:search", HubQuery, HubModels, "Hugging Face repositories with GGUF files, by name"
)
HUB_FILES: Final = Method(
    "hub:files", HubRepoQuery, HubFiles, "a repository's GGUF files; the one that fits memory"
)

# Pushes (broker to client notifications) ------------------------------------------------------
APP_READY: Final[Push[AppReady]] = Push("app:ready", AppReady, "the components are started")
COMPONENTS_EVENT: Final[Push[ComponentsEvent]] = Push(
    "components:event", ComponentsEvent, "numbered, subscribers"
)
ERRORS_UPDATE: Final[Push[list[ServiceError]]] = Push(
    "errors:update", list[ServiceError], "every open error, to all"
)
SETTINGS_CHANGED: Final[Push[SettingsSnapshot]] = Push(
    "settings:changed", SettingsSnapshot, "after a change, to all"
)
ENGINE_EVENT: Final[Push[EngineEvent]] = Push("engine:event", EngineEvent, "numbered, subscribers")
DISCOVERY_EVENT: Final[Push[DiscoveryEvent]] = Push(
    "discovery:event", DiscoveryEvent, "numbered, subscribers"
)
CLUSTER_EVENT: Final[Push[ClusterEvent]] = Push(
    "cluster:event", ClusterEvent, "numbered, subscribers"
)
JOBS_EVENT: Final[Push[JobsEvent]] = Push(
    "jobs:event", JobsEvent, "numbered, subscribers", former="workloads:event"
)


# Between members (docs/CLUSTER.md, "Cluster services") -----------------------------------------
# The engine and model methods a client may aim at another member with ``node`` (absent: this
# node); the broker forwards them over the member link and answers with the member's answer.
FORWARDED: Final[tuple[Method[Any, Any], ...]] = (
    ENGINE_GET_INSTALLED,
    ENGINE_LIST,
    ENGINE_STATUS,
    ENGINE_INSTALL,
    ENGINE_UNINSTALL,
    ENGINE_START,
    ENGINE_STOP,
    ENGINE_RESTART,
    ENGINE_SET_PORT,
    ENGINE_ACTION,
    ENGINE_MODELS,
    ENGINE_LOGS,
    ENGINE_VERSIONS,
    ENGINE_UPDATE,
    ENGINE_SCHEDULER,
)
# Everything a member may call over the member link: the forwarded methods (for this node
# only) and the streams it follows to mirror this node's engines, errors and jobs.
MEMBER_METHODS: Final[frozenset[str]] = frozenset(
    method.name
    for method in (
        *FORWARDED,
        PING,
        VERSION,
        NODEINFO_GET,
        ENGINE_SUBSCRIBE,
        ENGINE_UNSUBSCRIBE,
        ERRORS_GET_INITIAL,
        ERRORS_CLEAR,
        JOBS_GET_INITIAL,
        JOBS_SUBSCRIBE,
        JOBS_UNSUBSCRIBE,
    )
)


def all_methods() -> list[Method[Any, Any]]:
    """Every declared method, in declaration order."""
    return [value for value in globals().values() if isinstance(value, Method)]


def all_pushes() -> list[Push[Any]]:
    """Every declared push, in declaration order."""
    return [value for value in globals().values() if isinstance(value, Push)]
