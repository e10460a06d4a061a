"""The replica planner: when a model gets a replica on another member, and when one goes.

A pure function of frozen values (no clock, no I/O): the component (``component.py``) gathers
the inputs and carries out what it returns. Anchors: Knative's autoscaler (a target per
replica, a 60 s stable window, a 6 s panic window), llama-swap's idle TTL.

- **Up.** A model's expected wait (placement's estimate for the requests of this node's doors,
  ``WaitSample``) averaged over the stable window stays above ``target_wait_s``, or over the
  panic window above ``panic_factor`` times it: load it on the best ``Host`` that could serve it
  (weights on disk in an engine that can load them, room for them, nothing exclusive running,
  no load there already), at most ``max_per_model`` replicas of one model, one load per member
  at a time, and never by evicting another model that has work.
- **Down.** A replica this node holds that PAIR's planner loaded (``Replica``, not the user's)
  idle (no request running, none for ``ttl_s``) is unloaded. What the user loaded never is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Policy:
    """The planner's limits (the ``replicas_*`` settings)."""

    target_wait_s: float = 10.0
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_factor: float = 2.0
    ttl_s: float = 300.0
    max_per_model: int = 3


@dataclass(frozen=True, slots=True)
class WaitSample:
    """What this node's doors saw of one model in one report: when, how many requests, and
    the longest wait placement expected for one of them (seconds before it could start)."""

    at: float
    requests: int
    wait_s: float
    queued: int = 0


@dataclass(frozen=True, slots=True)
class Host:
    """A member (or this node) and engine that could hold a replica of the model.

    ``name`` is the engine's own name for the model there; ``resident`` whether it is loaded
    there now (then it already serves: not a place for another); ``on_disk`` whether the
    weights are there; ``free_bytes`` the memory free for them and ``model_bytes`` their size
    (None: unknown, then room is not checked); ``single_model`` an engine that holds one model
    at a time (llama.cpp: loading replaces it); ``other_busy`` whether what the load would
    evict has work; ``loading`` a load (any model) on that member is in flight;
    ``exclusive`` an exclusive operation runs on its engine.
    """

    node_id: str
    node_name: str
    engine: str
    name: str
    resident: bool = False
    on_disk: bool = True
    free_bytes: int | None = None
    model_bytes: int | None = None
    single_model: bool = False
    other_busy: bool = False
    loading: bool = False
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class ModelView:
    """One model as the planner sees it: its recent demand and the places it could go.

    ``changed_at`` is when the set of computers serving it last changed (a replica became
    ready or went): samples from before then describe a cluster that is gone and are not
    counted, so one slow minute does not load a second replica once the first has landed.
    """

    model: str
    samples: tuple[WaitSample, ...] = ()
    hosts: tuple[Host, ...] = ()
    changed_at: float | None = None


@dataclass(frozen=True, slots=True)
class Replica:
    """A model loaded on this node's engine by a replica planner (marked), with its use."""

    engine: str
    name: str
    loaded_at: float
    last_used_at: float | None = None
    active: int = 0
    ttl_s: float | None = None


@dataclass(frozen=True, slots=True)
class Load:
    """Load ``name`` on ``node_id``'s ``engine`` as a replica of ``model``, for ``reason``."""

    model: str
    node_id: str
    node_name: str
    engine: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unload:
    """Unload this node's replica ``name`` from ``engine``, for ``reason``."""

    engine: str
    name: str
    reason: str


Action = Load | Unload


def plan(
    models: tuple[ModelView, ...],
    held: tuple[Replica, ...],
    policy: Policy,
    now: float,
) -> tuple[Action, ...]:
    """What to load and unload now (empty: nothing). Pure: same inputs, same answer."""
    raise NotImplementedError  # the planner helper writes this
