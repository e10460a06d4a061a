"""The replica planner's state as `status` and `replicas:status` report it (docs/REPLICAS.md)."""

from __future__ import annotations

from typing import Literal

import msgspec

from backend.protocol.types.base import EngineName, NodeId, Wire

# ``auto``: on while the cluster has more than one member; ``on``; ``off``.
ReplicasMode = Literal["auto", "on", "off"]
ReplicaState = Literal["loading", "ready", "unloading", "failed"]


class ReplicaInfo(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A replica this node's planner loaded (on any member), or one it holds for a member's.

    ``model`` is the name clients asked for, ``name`` the engine's own name for it there.
    """

    model: str
    node_id: NodeId
    node_name: str
    engine: EngineName
    name: str
    state: ReplicaState
    reason: str
    since: float
    last_used_at: float | None = None
    error: str | None = None


class ReplicasStatus(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Whether the planner runs (``active``: ``mode`` and the member count say so), its
    limits, and the replicas it manages."""

    mode: ReplicasMode
    active: bool
    target_wait_s: float
    ttl_s: float
    max_per_model: int
    replicas: list[ReplicaInfo] = msgspec.field(default_factory=list)
