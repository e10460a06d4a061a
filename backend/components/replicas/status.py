"""The planner's settings, whether it runs, and its status: plain values and pure functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import msgspec

from backend.components.replicas.plan import Policy
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import ReplicaMark
from backend.protocol.types.replicas import ReplicaInfo, ReplicasMode, ReplicasStatus

_MODES: frozenset[str] = frozenset({"auto", "on", "off"})
_DEFAULTS = Policy()
# A hidden knob for tests: replicas idle this long are unloaded, whatever ``replicas_ttl_s``
# says (the setting's lowest, 30 s, is long to wait out in a test of what happens after it).
TTL_ENV = "PAIR_REPLICAS_TTL_S"
View = TypeVar("View", bound=msgspec.Struct)


class ReplicaSettings(msgspec.Struct, frozen=True):
    """The ``replicas_*`` settings the planner follows."""

    mode: ReplicasMode = "auto"
    policy: Policy = _DEFAULTS


def settings_of(view: object) -> ReplicaSettings:
    """The ``replicas_*`` settings of a settings view; a setting it lacks (or holds a value
    out of range) keeps the planner's default."""
    mode: ReplicasMode = getattr(view, "replicas_mode", "auto")
    target = _positive(getattr(view, "replicas_target_wait_s", None), _DEFAULTS.target_wait_s)
    ttl = _positive(getattr(view, "replicas_ttl_s", None), _DEFAULTS.ttl_s)
    most = getattr(view, "replicas_max_per_model", None)
    return ReplicaSettings(
        mode=mode if mode in _MODES else "auto",
        policy=Policy(
            target_wait_s=target,
            ttl_s=ttl,
            max_per_model=most if isinstance(most, int) and most >= 0 else _DEFAULTS.max_per_model,
        ),
    )


def ttl_from_environment(
    view: Callable[[], View], environ: Mapping[str, str]
) -> Callable[[], View]:
    """``view``, or, with ``PAIR_REPLICAS_TTL_S`` a positive number of seconds, ``view``
    whose ``replicas_ttl_s`` is that number (``view`` gives a ``msgspec.Struct``)."""
    try:
        ttl_s = float(environ.get(TTL_ENV, ""))
    except ValueError:
        return view
    if not math.isfinite(ttl_s) or ttl_s <= 0:
        return view
    return lambda: msgspec.structs.replace(view(), replicas_ttl_s=ttl_s)


def is_active(mode: ReplicasMode, members: int) -> bool:
    """Whether the planner runs: ``on``, or ``auto`` with another trusted member than this node."""
    return mode == "on" or (mode == "auto" and members > 0)


def held_infos(
    node_id: str,
    node_name: str,
    marks: Mapping[EngineName, Mapping[str, ReplicaMark]],
    last_used: Mapping[tuple[str, str], float],
) -> list[ReplicaInfo]:
    """The replicas this node's engines hold (whoever's planner loaded them), as ready."""
    return [
        ReplicaInfo(
            model=name,
            node_id=NodeId(node_id),
            node_name=node_name,
            engine=engine,
            name=name,
            state="ready",
            reason=mark.reason,
            since=mark.loaded_at,
            last_used_at=last_used.get((engine, name)),
        )
        for engine, by_name in sorted(marks.items())
        for name, mark in sorted(by_name.items())
    ]


def status_of(
    settings: ReplicaSettings,
    active: bool,
    managed: Iterable[ReplicaInfo],
    held: Iterable[ReplicaInfo],
) -> ReplicasStatus:
    """The status: the replicas this planner manages, then those held here it does not."""
    listed = list(managed)
    seen = {(info.node_id, info.engine, info.name) for info in listed}
    listed += [info for info in held if (info.node_id, info.engine, info.name) not in seen]
    return ReplicasStatus(
        mode=settings.mode,
        active=active,
        target_wait_s=settings.policy.target_wait_s,
        ttl_s=settings.policy.ttl_s,
        max_per_model=settings.policy.max_per_model,
        replicas=listed,
    )


def _positive(value: object, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default
