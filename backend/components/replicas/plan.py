"""The replica planner: when a model gets a replica on another member, and when one goes.

A pure function of frozen values (no clock, no I/O): the component (``component.py``) gathers
the inputs and carries out what it returns. Anchors: Knative's autoscaler (a target per
replica, a 60 s stable window, a 6 s panic window), llama-swap's idle TTL.

- **Up.** A model's expected wait (placement's estimate for the requests of this node's doors,
  ``WaitSample``) averaged over the stable window stays above ``target_wait_s``, or over the
  panic window above ``panic_factor`` times it, or rises over the panic window so fast that
  it would pass the target within ``lead_s`` (a load's time; ``trend.py``): load it on the
  best ``Host`` that could serve it (weights on disk in an engine that can load them, room for
  them, nothing exclusive running, no load there already), at most ``max_per_model``
  replicas of one model, one load per member at a time, and never by evicting another model
  that has work.
- **Down.** A replica this node holds that PAIR's planner loaded (``Replica``, not the user's)
  idle (no request running, none for ``ttl_s``) is unloaded. What the user loaded never is.
"""

from __future__ import annotations

import math

import msgspec

from backend.components.replicas.trend import rises_past, rising_wait


class Policy(msgspec.Struct, frozen=True):
    """The planner's limits (the ``replicas_*`` settings)."""

    target_wait_s: float = 10.0
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_factor: float = 2.0
    ttl_s: float = 300.0
    max_per_model: int = 3
    lead_s: float = 10.0  # about a replica's load: how far ahead a rising wait is projected
    rising_floor: float = 0.5  # of the target: a rising wait this short is no trigger yet


class WaitSample(msgspec.Struct, frozen=True):
    """What this node's doors saw of one model in one report: when, how many requests, and
    the longest wait placement expected for one of them (seconds before it could start)."""

    at: float
    requests: int
    wait_s: float
    queued: int = 0
    # The member(s) where those requests were placed to wait (named in a Load's reason).
    on: str = ""


class Host(msgspec.Struct, frozen=True):
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


class ModelView(msgspec.Struct, frozen=True):
    """One model as the planner sees it: its recent demand and the places it could go.

    ``changed_at`` is when the set of computers serving it last changed (a replica became
    ready or went): samples from before then describe a cluster that is gone and are not
    counted, so one slow minute does not load a second replica once the first has landed.
    """

    model: str
    samples: tuple[WaitSample, ...] = ()
    hosts: tuple[Host, ...] = ()
    changed_at: float | None = None


class Replica(msgspec.Struct, frozen=True):
    """A model loaded on this node's engine by a replica planner (marked), with its use."""

    engine: str
    name: str
    loaded_at: float
    last_used_at: float | None = None
    active: int = 0
    ttl_s: float | None = None


class Load(msgspec.Struct, frozen=True):
    """Load ``name`` on ``node_id``'s ``engine`` as a replica of ``model``, for ``reason``."""

    model: str
    node_id: str
    node_name: str
    engine: str
    name: str
    reason: str


class Unload(msgspec.Struct, frozen=True):
    """Unload this node's replica ``name`` from ``engine``, for ``reason``."""

    engine: str
    name: str
    reason: str


Action = Load | Unload


class Pressure(msgspec.Struct, frozen=True):
    """Why a model wants more replicas: the mean expected wait over the window that tripped
    (the panic one when both did), that window's length, and where the requests waited."""

    wait_s: float
    window_s: float
    panic: bool
    waited_on: tuple[str, ...] = ()
    rising: float | None = None  # the latest wait, when a rising trend tripped (``trend``)


# Fewer requests than this in a window are not evidence: one slow request is not demand.
MIN_REQUESTS = 2


def plan(
    models: tuple[ModelView, ...],
    held: tuple[Replica, ...],
    policy: Policy,
    now: float,
) -> tuple[Action, ...]:
    """What to load and unload now (empty: nothing). Pure: same inputs, same answer."""
    pressures = {view.model: pressure_of(view, policy, now) for view in models}
    pressed = [view for view in models if pressures[view.model] is not None]
    keep = {(host.engine, host.name) for view in pressed for host in view.hosts}
    keep_models = {view.model for view in pressed}
    unloads = plan_unloads(held, policy, now, keep=keep, keep_models=keep_models)
    return (*plan_loads(models, pressures, policy), *unloads)


def mean_wait(samples: tuple[WaitSample, ...], since: float) -> tuple[int, float]:
    """Requests seen after ``since`` and their request-weighted mean expected wait."""
    requests = 0
    weighted = 0.0
    for sample in samples:
        if sample.at > since and sample.requests > 0:
            requests += sample.requests
            weighted += sample.requests * max(sample.wait_s, 0.0)
    return requests, (weighted / requests if requests else 0.0)


def pressure_of(view: ModelView, policy: Policy, now: float) -> Pressure | None:
    """The model's pressure to scale up now, or None when neither window trips (or there is
    too little evidence). Samples from before ``changed_at`` describe a cluster that is gone."""
    if policy.target_wait_s <= 0:
        return None  # no meaningful target: nothing to compare with
    floor = view.changed_at if view.changed_at is not None else -math.inf
    panic = _window(view, max(floor, now - policy.panic_window_s))
    stable = _window(view, max(floor, now - policy.stable_window_s))
    if panic[0] >= MIN_REQUESTS and panic[1] > policy.panic_factor * policy.target_wait_s:
        return Pressure(panic[1], policy.panic_window_s, True, panic[2])
    if stable[0] >= MIN_REQUESTS and stable[1] > policy.target_wait_s:
        return Pressure(stable[1], policy.stable_window_s, False, stable[2])
    since = max(floor, now - policy.panic_window_s)
    rising = rising_wait(view.samples, since, policy.lead_s)
    if rising is not None and rises_past(
        rising, policy.target_wait_s, policy.rising_floor, MIN_REQUESTS
    ):
        return Pressure(rising.projected_s, policy.lead_s, False, panic[2], rising.latest_s)
    return None


def _window(view: ModelView, since: float) -> tuple[int, float, tuple[str, ...]]:
    """A window's requests, mean wait and the members named by its samples (sorted, each
    once: a sample names one or several, joined by ", ")."""
    requests, wait_s = mean_wait(view.samples, since)
    named = {
        name
        for s in view.samples
        if s.at > since and s.requests > 0 and s.on
        for name in s.on.split(", ")
    }
    return requests, wait_s, tuple(sorted(named))


def extra_replicas(wait_s: float, target_wait_s: float) -> int:
    """Knative's rule: enough replicas that each sees the target, less the one serving now
    (at least one once a window has tripped)."""
    return max(1, math.ceil(wait_s / target_wait_s) - 1)


def has_room(host: Host) -> bool:
    """Whether the weights fit in the free memory (unknown on either side: assumed so)."""
    if host.free_bytes is None or host.model_bytes is None:
        return True
    return host.free_bytes >= host.model_bytes


def could_hold(host: Host) -> bool:
    """Whether a load on this host is allowed on its own terms: weights on disk, not there or
    arriving already, nothing exclusive running, room, and nothing with work evicted (a
    single-model engine always replaces what it holds; another only when it lacks room)."""
    if host.resident or host.loading or host.exclusive or not host.on_disk:
        return False
    if not has_room(host):
        return False
    evicts = host.single_model or host.free_bytes is None or host.model_bytes is None
    return not (host.other_busy and evicts)


def host_order(host: Host) -> tuple[bool, int, str, str, str]:
    """Known room first, most free bytes first, then names: the same order on every run."""
    known = host.free_bytes is not None
    return (not known, -(host.free_bytes or 0), host.node_name, host.node_id, host.engine)


def plan_loads(
    models: tuple[ModelView, ...],
    pressures: dict[str, Pressure | None],
    policy: Policy,
) -> list[Load]:
    """Loads for the models under pressure, the most pressed first for the members, one load
    per member in all; returned by model name then host order."""
    busy = {host.node_id for view in models for host in view.hosts if host.loading}
    pressed = [view for view in models if pressures[view.model] is not None]
    pressed.sort(key=lambda view: (-_urgency(pressures[view.model]), view.model))
    loads: list[tuple[str, int, Load]] = []
    for view in pressed:
        pressure = pressures[view.model]
        assert pressure is not None  # filtered above
        chosen = choose_hosts(view, pressure, policy, busy)
        busy.update(host.node_id for host in chosen)
        loads.extend(
            (view.model, rank, _load(view, host, pressure, policy))
            for rank, host in enumerate(chosen)
        )
    loads.sort(key=lambda entry: (entry[0], entry[1]))
    return [load for _, _, load in loads]


def _urgency(pressure: Pressure | None) -> float:
    return pressure.wait_s if pressure is not None else 0.0


def choose_hosts(view: ModelView, pressure: Pressure, policy: Policy, busy: set[str]) -> list[Host]:
    """The hosts to load ``view``'s model on now, best first: as many as the wait asks for,
    within ``max_per_model`` (counting replicas serving or arriving), on members with no load
    in flight and none serving this model already. A load in flight holds off a stable-window
    trigger (wait for it to land); a panic adds more."""
    serving = [host for host in view.hosts if host.resident or host.loading]
    if not pressure.panic and any(host.loading for host in view.hosts):
        return []
    room = policy.max_per_model - len(serving)
    wanted = min(extra_replicas(pressure.wait_s, policy.target_wait_s), room)
    taken = set(busy) | {host.node_id for host in view.hosts if host.resident}
    chosen: list[Host] = []
    for host in sorted(view.hosts, key=host_order):
        if len(chosen) >= wanted:
            break
        if host.node_id not in taken and could_hold(host):
            chosen.append(host)
            taken.add(host.node_id)
    return chosen


def _load(view: ModelView, host: Host, pressure: Pressure, policy: Policy) -> Load:
    return Load(
        model=view.model,
        node_id=host.node_id,
        node_name=host.node_name,
        engine=host.engine,
        name=host.name,
        reason=load_reason(view.model, host.node_name, pressure, policy),
    )


def load_reason(model: str, node_name: str, pressure: Pressure, policy: Policy) -> str:
    """A Load's reason for the jobs list: how long, against which target, where, and where to.

    "qwen2.5:7b waited 18 s (target 10 s) on gpu-box; loading it on laptop"; a panic says so.
    """
    waited = format_duration(pressure.wait_s)
    target = format_duration(policy.target_wait_s)
    if pressure.rising is not None:
        latest, lead = format_duration(pressure.rising), format_duration(pressure.window_s)
        text = f"{model} waits {latest} and rising: {waited} within {lead} (target {target})"
    elif pressure.panic:
        window = format_duration(pressure.window_s)
        text = f"{model} waited {waited} in the last {window} (panic over {target} target)"
    else:
        text = f"{model} waited {waited} (target {target})"
    if pressure.waited_on:
        text += " on " + ", ".join(pressure.waited_on)
    return f"{text}; loading it on {node_name}"


def plan_unloads(
    held: tuple[Replica, ...],
    policy: Policy,
    now: float,
    keep: set[tuple[str, str]] | None = None,
    keep_models: set[str] | None = None,
) -> list[Unload]:
    """Unloads for the held replicas idle past their TTL (none running, none for ``ttl_s``),
    except those of a model being scaled up now (``keep``: engine and name; ``keep_models``:
    the model's own name, whatever the engine); sorted by engine then name."""
    keep = keep or set()
    keep_models = keep_models or set()
    records: dict[tuple[str, str], list[Replica]] = {}
    for replica in held:
        records.setdefault((replica.engine, replica.name), []).append(replica)
    unloads: list[Unload] = []
    for (engine, name), replicas in sorted(records.items()):
        if name in keep_models or (engine, name) in keep:
            continue
        idle = [_idle_past_ttl(replica, policy, now) for replica in replicas]
        if all(entry is not None for entry in idle):
            idle_s, ttl_s = min(entry for entry in idle if entry is not None)
            reason = f"idle for {format_duration(idle_s)} (TTL {format_duration(ttl_s)})"
            unloads.append(Unload(engine=engine, name=name, reason=reason))
    return unloads


def _idle_past_ttl(replica: Replica, policy: Policy, now: float) -> tuple[float, float] | None:
    """How long the replica has been idle and its TTL, when that is past it (else None)."""
    if replica.active > 0:
        return None
    ttl_s = replica.ttl_s if replica.ttl_s is not None else policy.ttl_s
    # A use from before this replica was loaded (the model served here earlier, then unloaded)
    # says nothing of its idleness: a replica whose load outlasted its TTL would go at once.
    since = max(replica.loaded_at, replica.last_used_at or replica.loaded_at)
    idle_s = now - since
    return (idle_s, ttl_s) if idle_s >= ttl_s else None


def format_duration(seconds: float) -> str:
    """A duration as people read it in a reason: "2.5 s", "18 s", "5 min", "1.5 h"."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{_trimmed(seconds)} s"
    if seconds < 120:
        return f"{round(seconds)} s"
    if seconds < 7200:
        return f"{_trimmed(seconds / 60)} min"
    return f"{_trimmed(seconds / 3600)} h"


def _trimmed(value: float) -> str:
    """One decimal below ten, whole numbers above, without a trailing ".0"."""
    text = f"{value:.1f}" if value < 10 else f"{round(value)}"
    return text.removesuffix(".0")
