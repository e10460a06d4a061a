"""The broker itself: ping, version, status and ports, supervised components, errors, log level."""

from __future__ import annotations

from typing import Literal

import msgspec

from backend.protocol.types.base import EngineName, NodeId, Wire
from backend.protocol.types.replicas import ReplicasStatus

LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
Severity = Literal["info", "warning", "error"]
ErrorActionKind = Literal["retry", "dismiss", "restart-component", "open-settings"]
ComponentKind = Literal["task", "worker"]
ComponentStatus = Literal["starting", "running", "backoff", "failed", "stopped"]


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
    replicas: ReplicasStatus | None = None  # the replica planner (docs/REPLICAS.md)


class LogLevelParams(Wire, frozen=True, kw_only=True):
    """Parameters and answer of ``log:set-level``."""

    level: LogLevel


class ComponentRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``components:restart``."""

    name: str


class AppReady(Wire, frozen=True, kw_only=True):
    """Push ``app:ready``: the broker's components are started."""

    version: str
    node_name: str
    pid: int
