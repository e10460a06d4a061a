"""The never-rules over generated clusters: whatever the demand, hosts and held replicas, the
planner unloads only what it holds (idle past its TTL), loads at most once per member and only
where a load is allowed (no eviction of work, room, weights on disk), keeps ``max_per_model``,
and answers the same for the same inputs in any order."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.components.replicas.plan import (
    Host,
    Load,
    ModelView,
    Policy,
    Replica,
    Unload,
    WaitSample,
    plan,
)

NOW = 10_000.0
MODELS = ["qwen", "llama", "phi"]
NODES = ["a", "b", "c", "d"]
ENGINES = ["ollama", "llama.cpp"]

# Each flag holds for one host in four (on_disk for three in four): with even odds a load in
# flight somewhere would rule out nearly every member and the rules would rarely be tested.
_rarely = st.integers(min_value=0, max_value=3).map(lambda draw: draw == 0)
# A load in flight rules out its member for every model: rarer still.
_seldom = st.integers(min_value=0, max_value=9).map(lambda draw: draw == 0)
_bytes = st.none() | st.integers(min_value=0, max_value=8)
_sample = st.builds(
    WaitSample,
    at=st.floats(min_value=NOW - 120, max_value=NOW),
    requests=st.integers(min_value=0, max_value=5),
    wait_s=st.floats(min_value=0, max_value=200),
    on=st.sampled_from(["", "a", "b"]),
)


@st.composite
def _host(draw: st.DrawFn, model: str) -> Host:
    node = draw(st.sampled_from(NODES))
    return Host(
        node_id=f"id-{node}",
        node_name=node,
        engine=draw(st.sampled_from(ENGINES)),
        name=model,
        resident=draw(_rarely),
        on_disk=not draw(_rarely),
        free_bytes=draw(_bytes),
        model_bytes=draw(_bytes),
        single_model=draw(_rarely),
        other_busy=draw(_rarely),
        loading=draw(_seldom),
        exclusive=draw(_rarely),
    )


@st.composite
def _view(draw: st.DrawFn, model: str) -> ModelView:
    return ModelView(
        model=model,
        samples=tuple(draw(st.lists(_sample, max_size=8))),
        hosts=tuple(draw(st.lists(_host(model), max_size=5))),
        changed_at=draw(st.none() | st.floats(min_value=NOW - 120, max_value=NOW)),
    )


_replica = st.builds(
    Replica,
    engine=st.sampled_from(ENGINES),
    name=st.sampled_from([*MODELS, "other"]),
    loaded_at=st.floats(min_value=NOW - 2000, max_value=NOW),
    last_used_at=st.none() | st.floats(min_value=NOW - 2000, max_value=NOW),
    active=st.integers(min_value=0, max_value=2),
    ttl_s=st.none() | st.floats(min_value=0, max_value=1000),
)
_policy = st.builds(
    Policy,
    target_wait_s=st.floats(min_value=0.5, max_value=60),
    panic_factor=st.floats(min_value=1, max_value=4),
    ttl_s=st.floats(min_value=0, max_value=1000),
    max_per_model=st.integers(min_value=0, max_value=6),
)
_models = st.lists(st.sampled_from(MODELS), unique=True).flatmap(
    lambda names: st.tuples(*(_view(name) for name in names))
)

_SETTINGS = settings(max_examples=300, deadline=None, database=None, derandomize=True)


@_SETTINGS
@given(_models, st.lists(_replica, max_size=6).map(tuple), _policy)
def test_the_never_rules_hold(
    models: tuple[ModelView, ...], held: tuple[Replica, ...], policy: Policy
) -> None:
    actions = plan(models, held, policy, NOW)
    loads = [a for a in actions if isinstance(a, Load)]
    unloads = [a for a in actions if isinstance(a, Unload)]
    _check_loads(models, loads, policy)
    _check_unloads(held, unloads, policy)
    assert actions == (*loads, *unloads)  # loads first, then unloads


def _check_loads(models: tuple[ModelView, ...], loads: list[Load], policy: Policy) -> None:
    members = Counter(load.node_id for load in loads)
    assert all(count == 1 for count in members.values()), "two loads on one member"
    loading = {h.node_id for view in models for h in view.hosts if h.loading}
    assert not loading & set(members), "a load on a member with one in flight"
    views = {view.model: view for view in models}
    for load in loads:
        view = views[load.model]
        here = [h for h in view.hosts if (h.node_id, h.engine) == (load.node_id, load.engine)]
        assert any(_allowed(h) for h in here), "a load where none is allowed"
        assert not any(h.resident for h in view.hosts if h.node_id == load.node_id)
    per_model = Counter(load.model for load in loads)
    for model, count in per_model.items():
        serving = sum(1 for h in views[model].hosts if h.resident or h.loading)
        assert serving + count <= policy.max_per_model
    assert [load.model for load in loads] == sorted(load.model for load in loads)


def _allowed(host: Host) -> bool:
    """A load there keeps the rules: weights on disk, not there yet, nothing exclusive, room,
    and no eviction of a model with work."""
    if not host.on_disk or host.resident or host.exclusive:
        return False
    fits = host.free_bytes is not None and host.model_bytes is not None
    if fits and host.free_bytes < host.model_bytes:  # type: ignore[operator]
        return False
    return not (host.other_busy and (host.single_model or not fits))


def _check_unloads(held: tuple[Replica, ...], unloads: list[Unload], policy: Policy) -> None:
    by_key = {(r.engine, r.name): r for r in held}
    for unload in unloads:
        replica = by_key.get((unload.engine, unload.name))
        assert replica is not None, "unloaded what this node's planner does not hold"
        matching = [r for r in held if (r.engine, r.name) == (unload.engine, unload.name)]
        assert all(_idle_past_ttl(r, policy) for r in matching)
    assert len({(u.engine, u.name) for u in unloads}) == len(unloads), "one replica unloaded twice"
    assert unloads == sorted(unloads, key=lambda u: (u.engine, u.name))


def _idle_past_ttl(replica: Replica, policy: Policy) -> bool:
    ttl_s = replica.ttl_s if replica.ttl_s is not None else policy.ttl_s
    since = replica.last_used_at if replica.last_used_at is not None else replica.loaded_at
    return replica.active == 0 and NOW - since >= ttl_s


@_SETTINGS
@given(_models, st.lists(_replica, max_size=6).map(tuple), _policy, st.randoms())
def test_the_answer_does_not_depend_on_input_order(
    models: tuple[ModelView, ...], held: tuple[Replica, ...], policy: Policy, rng: object
) -> None:
    shuffle = rng.shuffle  # type: ignore[attr-defined]
    views = [
        ModelView(v.model, v.samples, tuple(_shuffled(v.hosts, shuffle)), v.changed_at)
        for v in models
    ]
    shuffled_held = _shuffled(held, shuffle)
    shuffle(views)
    again = plan(tuple(views), tuple(shuffled_held), policy, NOW)
    assert again == plan(models, held, policy, NOW)


def _shuffled(items: tuple[object, ...], shuffle: object) -> list:  # type: ignore[type-arg]
    copy = list(items)
    shuffle(copy)  # type: ignore[operator]
    return copy
