"""Engines: status, commands, models, progress, logs, versions and events (``engine:*``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from backend.protocol.types.base import EngineName, NodeId, Wire
from backend.protocol.types.scheduler import SchedulerStates

EngineState = Literal["not-installed", "stopped", "starting", "running", "stopping", "error"]
EngineActionName = Literal[
    "list_models", "loaded_models", "pull_model", "load_model", "unload_model", "delete_model"
]


class SpreadShare(Wire, frozen=True, kw_only=True):
    """One member's part of a spread model: how many of its layers, in what memory."""

    node: NodeId
    name: str
    layers: int
    bytes: int
    memory: Literal["vram", "ram"]
    host: bool = False


class SpreadStatus(Wire, frozen=True, kw_only=True):
    """A model this computer runs spread over members (llama.cpp's RPC backend): who holds
    which share, and whether it runs as planned (``degraded``: a member was lost; ``reason``
    says which and what PAIR did about it)."""

    model: str
    state: Literal["running", "degraded"]
    shares: list[SpreadShare]
    reason: str = ""


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
    # What the engine computes on ("CPU", "CUDA 12.4", "Vulkan", "Metal", "ROCm"); None: unknown.
    backend: str | None = None
    # The model runs spread over members (llama.cpp only); None: on this computer alone.
    spread: SpreadStatus | None = None


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
    # ``load_model`` of llama.cpp: spread the model over these members (names or node ids)
    # as well as this computer; absent: spread only when no single computer has room.
    across: list[str] | None = None
    # ``load_model`` asked by a replica planner (docs/REPLICAS.md): the model is marked as a
    # replica PAIR loaded, unloaded again once idle past its TTL; ``reason`` says why it was
    # loaded. A load without it (the user's) clears the mark: PAIR never unloads that.
    replica: bool = False
    reason: str | None = None
    ttl_s: float | None = None  # the replica's idle time before it is unloaded


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
    sizes_by_engine: dict[EngineName, dict[str, int]] = msgspec.field(default_factory=dict)
    details_by_engine: dict[EngineName, dict[str, ModelDetails]] = msgspec.field(
        default_factory=dict
    )
    # engine -> model -> the identity of its weights, ``sha256:<hex>`` (a llama.cpp GGUF's
    # SHA-256, Ollama's model layer digest); a model not hashed yet (or unreadable) is absent.
    digests_by_engine: dict[EngineName, dict[str, str]] = msgspec.field(default_factory=dict)
    # engine -> model -> the mark of a replica PAIR's planner loaded (unloaded once idle past
    # its TTL); models the user loaded have none.
    replicas_by_engine: dict[EngineName, dict[str, ReplicaMark]] = msgspec.field(
        default_factory=dict
    )


class ReplicaMark(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A model PAIR's replica planner loaded on this engine: when, why (``reason``: "qwen2.5
    waited 18 s on gpu-box"), by which node's planner, and the idle time after which it is
    unloaded again (``ttl_s``)."""

    loaded_at: float
    reason: str
    by: NodeId | None = None
    ttl_s: float | None = None


class ModelDetails(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """What a model file says about itself (llama.cpp's GGUF header); unknown values absent."""

    file: str | None = None
    architecture: str | None = None
    quantization: str | None = None
    context_length: int | None = None


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
    engines: list[EngineStatus] = msgspec.field(default_factory=list)
    models: EngineModels | None = None
    pulls: list[PullProgress] = msgspec.field(default_factory=list)
    installs: list[InstallProgress] = msgspec.field(default_factory=list)
    error: str | None = None


class EnginesSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``engine:subscribe``: this node's engines, their last known models and the pulls
    and installs in progress, and every other member's (``members``); apply later
    ``engine:event`` pushes whose ``seq`` is greater."""

    seq: int
    engines: list[EngineStatus]
    models: EngineModels
    pulls: list[PullProgress] = msgspec.field(default_factory=list)
    installs: list[InstallProgress] = msgspec.field(default_factory=list)
    members: list[MemberEngines] = msgspec.field(default_factory=list)
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
