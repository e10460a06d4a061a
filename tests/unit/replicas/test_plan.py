"""The replica planner as a pure function: its windows, how many replicas and where, the TTL,
and the never-rules (never unload what this node's planner did not load, never two loads on one
member, never evict another model that has work)."""

from __future__ import annotations

from backend.components.replicas.plan import (
    Host,
    Load,
    ModelView,
    Policy,
    Replica,
    Unload,
    WaitSample,
    format_duration,
    plan,
)

NOW = 1000.0
POLICY = Policy(target_wait_s=10.0, stable_window_s=60.0, panic_window_s=6.0, panic_factor=2.0)
GIB = 1024**3


def _host(node: str, **fields: object) -> Host:
    values: dict[str, object] = {"engine": "ollama", "name": "qwen2.5:7b"} | fields
    return Host(node_id=f"id-{node}", node_name=node, **values)  # type: ignore[arg-type]


def _view(*samples: WaitSample, hosts: tuple[Host, ...] = (), **fields: object) -> ModelView:
    hosts = hosts or (_host("gpu-box", resident=True), _host("laptop"))
    return ModelView("qwen2.5:7b", samples, hosts, **fields)  # type: ignore[arg-type]


def _waits(ages_and_waits: list[tuple[float, float]], requests: int = 1) -> tuple[WaitSample, ...]:
    return tuple(
        WaitSample(NOW - age, requests, wait, on="gpu-box") for age, wait in ages_and_waits
    )


def _loads(actions: tuple[Load | Unload, ...]) -> list[tuple[str, str]]:
    return [(a.model, a.node_name) for a in actions if isinstance(a, Load)]


# Windows


def test_a_short_spike_over_the_panic_threshold_loads_a_replica() -> None:
    spike = _waits([(3, 25.0), (1, 25.0)])  # 25 s > 2 x 10 s, inside the 6 s panic window
    (load,) = plan((_view(*spike),), (), POLICY, NOW)
    assert load == Load(
        model="qwen2.5:7b",
        node_id="id-laptop",
        node_name="laptop",
        engine="ollama",
        name="qwen2.5:7b",
        reason="qwen2.5:7b waited 25 s in the last 6 s (panic over 10 s target) on gpu-box; "
        "loading it on laptop",
    )


def test_a_spike_under_the_panic_threshold_waits_for_the_stable_mean() -> None:
    calm = _waits([(50, 2.0), (40, 2.0), (30, 2.0)])
    spike = _waits([(3, 15.0), (1, 15.0)])  # over target, under 2 x target
    assert plan((_view(*calm, *spike),), (), POLICY, NOW) == ()  # stable mean 7.2 s
    longer = _waits([(15, 15.0), (10, 15.0), (5, 15.0)])
    (load,) = plan((_view(*calm, *spike, *longer),), (), POLICY, NOW)  # stable mean 10.1 s
    assert load.reason == "qwen2.5:7b waited 10 s (target 10 s) on gpu-box; loading it on laptop"


def test_the_mean_is_weighted_by_requests() -> None:
    many_fast = WaitSample(NOW - 30, 9, 1.0)
    one_slow = WaitSample(NOW - 20, 1, 95.0)  # plain mean 48 s, weighted 10.4 s
    assert _loads(plan((_view(many_fast, one_slow),), (), POLICY, NOW)) == [
        ("qwen2.5:7b", "laptop")
    ]
    one_less_slow = WaitSample(NOW - 20, 1, 90.0)  # weighted 9.9 s
    assert plan((_view(many_fast, one_less_slow),), (), POLICY, NOW) == ()


def test_samples_older_than_the_window_are_ignored() -> None:
    old = _waits([(120, 90.0), (61, 90.0)])
    assert plan((_view(*old, *_waits([(30, 5.0), (20, 5.0)])),), (), POLICY, NOW) == ()


def test_samples_before_the_change_are_ignored() -> None:
    slow = _waits([(30, 40.0), (20, 40.0), (10, 40.0)])
    assert _loads(plan((_view(*slow),), (), POLICY, NOW))
    assert plan((_view(*slow, changed_at=NOW - 15),), (), POLICY, NOW) == ()  # one request left


def test_one_request_is_not_evidence() -> None:
    assert plan((_view(*_waits([(1, 500.0)])),), (), POLICY, NOW) == ()
    assert _loads(plan((_view(WaitSample(NOW - 1, 2, 500.0)),), (), POLICY, NOW))


def test_no_demand_no_load() -> None:
    assert plan((_view(),), (), POLICY, NOW) == ()
    assert plan((_view(*_waits([(3, 10.0), (1, 10.0)])),), (), POLICY, NOW) == ()  # at target


# Targets and counts


def _spare(count: int) -> tuple[Host, ...]:
    return (_host("gpu-box", resident=True), *(_host(f"node-{i}") for i in range(count)))


def test_extra_replicas_follow_the_ceil_rule() -> None:
    big = Policy(max_per_model=10)
    for wait, extra in [(11.0, 1), (20.0, 1), (21.0, 2), (30.0, 2), (45.0, 4)]:
        view = _view(*_waits([(30, wait), (20, wait)]), hosts=_spare(6))
        assert len(_loads(plan((view,), (), big, NOW))) == extra, wait


def test_max_per_model_counts_resident_and_loading_hosts() -> None:
    hosts = (_host("a", resident=True), _host("b", resident=True), *_spare(4)[1:])
    view = _view(*_waits([(3, 90.0), (1, 90.0)]), hosts=hosts)  # asks for 8 more
    assert len(_loads(plan((view,), (), Policy(max_per_model=3), NOW))) == 1
    arriving = (*hosts, _host("c", loading=True))
    view = _view(*_waits([(3, 90.0), (1, 90.0)]), hosts=arriving)  # panic: a load may be added
    assert _loads(plan((view,), (), Policy(max_per_model=4), NOW)) == [("qwen2.5:7b", "node-0")]
    assert plan((view,), (), Policy(max_per_model=3), NOW) == ()


def test_a_load_in_flight_holds_off_a_stable_trigger_but_not_a_panic() -> None:
    hosts = (_host("gpu-box", resident=True), _host("laptop", loading=True), _host("studio"))
    stable = _view(*_waits([(40, 15.0), (30, 15.0)]), hosts=hosts)
    assert plan((stable,), (), POLICY, NOW) == ()
    panic = _view(*_waits([(2, 25.0), (1, 25.0)]), hosts=hosts)
    assert _loads(plan((panic,), (), POLICY, NOW)) == [("qwen2.5:7b", "studio")]


def test_one_load_per_member_across_models() -> None:
    slow = _waits([(3, 90.0), (1, 90.0)])
    two_engines = (
        _host("gpu-box", resident=True),
        _host("laptop", engine="ollama"),
        _host("laptop", engine="llama.cpp", name="qwen.gguf"),
    )
    assert len(_loads(plan((_view(*slow, hosts=two_engines),), (), POLICY, NOW))) == 1
    other = ModelView(
        "llama3:8b",
        slow,
        (_host("gpu-box", name="llama3:8b", resident=True), _host("laptop", name="llama3:8b")),
    )
    actions = plan((_view(*slow), other), (), POLICY, NOW)
    assert len(actions) == 1  # the laptop can take one of the two now


def test_the_most_pressed_model_gets_the_member_first() -> None:
    hot = _waits([(3, 90.0), (1, 90.0)])
    warm = _waits([(3, 30.0), (1, 30.0)])
    llama = ModelView(
        "llama3:8b",
        hot,
        (_host("gpu-box", name="llama3:8b", resident=True), _host("laptop", name="llama3:8b")),
    )
    assert _loads(plan((_view(*warm), llama), (), POLICY, NOW)) == [("llama3:8b", "laptop")]


def test_hosts_are_ordered_by_known_room_then_free_bytes_then_name() -> None:
    hosts = (
        _host("gpu-box", resident=True),
        _host("a-unknown"),
        _host("b-small", free_bytes=8 * GIB, model_bytes=5 * GIB),
        _host("c-large", free_bytes=40 * GIB, model_bytes=5 * GIB),
        _host("d-large", free_bytes=40 * GIB, model_bytes=5 * GIB),
    )
    view = _view(*_waits([(3, 90.0), (1, 90.0)]), hosts=hosts)
    names = [n for _, n in _loads(plan((view,), (), Policy(max_per_model=10), NOW))]
    assert names == ["c-large", "d-large", "b-small", "a-unknown"]
    reversed_view = _view(*_waits([(3, 90.0), (1, 90.0)]), hosts=hosts[::-1])
    assert plan((reversed_view,), (), Policy(max_per_model=10), NOW) == plan(
        (view,), (), Policy(max_per_model=10), NOW
    )


def test_loads_come_by_model_name_then_unloads() -> None:
    slow = _waits([(3, 90.0), (1, 90.0)])
    b = ModelView("b", slow, (_host("x", name="b", resident=True), _host("y", name="b")))
    a = ModelView("a", slow, (_host("x", name="a", resident=True), _host("z", name="a")))
    idle = Replica("ollama", "c", loaded_at=0.0)
    actions = plan((b, a), (idle,), POLICY, NOW)
    assert [type(x).__name__ for x in actions] == ["Load", "Load", "Unload"]
    assert [x.name for x in actions] == ["a", "b", "c"]


# Eligibility


def _only(host: Host) -> ModelView:
    return _view(*_waits([(3, 90.0), (1, 90.0)]), hosts=(_host("gpu-box", resident=True), host))


def test_ineligible_hosts_get_no_load() -> None:
    refused = [
        _host("laptop", free_bytes=4 * GIB, model_bytes=5 * GIB),
        _host("laptop", exclusive=True),
        _host("laptop", loading=True),
        _host("laptop", on_disk=False),
        _host("laptop", resident=True),
        _host("laptop", single_model=True, other_busy=True),
        _host("laptop", other_busy=True),  # room unknown: the load may evict it
        _host("gpu-box"),  # the model is served on that member already
    ]
    for host in refused:
        assert plan((_only(host),), (), POLICY, NOW) == (), host


def test_eligible_hosts_get_a_load() -> None:
    allowed = [
        _host("laptop", free_bytes=5 * GIB, model_bytes=5 * GIB),
        _host("laptop", free_bytes=1, model_bytes=None),
        _host("laptop", single_model=True),
        _host("laptop", other_busy=True, free_bytes=9 * GIB, model_bytes=5 * GIB),
    ]
    for host in allowed:
        assert _loads(plan((_only(host),), (), POLICY, NOW)) == [("qwen2.5:7b", "laptop")], host


def test_a_member_loading_another_model_gets_no_load() -> None:
    slow = _waits([(3, 90.0), (1, 90.0)])
    other = ModelView("llama3:8b", (), (_host("laptop", name="llama3:8b", loading=True),))
    assert plan((_view(*slow), other), (), POLICY, NOW) == ()


# TTL


def test_idle_replicas_go_after_their_ttl() -> None:
    active = Replica("ollama", "a", loaded_at=0.0, last_used_at=0.0, active=1)
    recent = Replica("ollama", "b", loaded_at=0.0, last_used_at=NOW - 299)
    stale = Replica("ollama", "c", loaded_at=0.0, last_used_at=NOW - 301)
    never_used = Replica("ollama", "d", loaded_at=NOW - 300)
    short = Replica("llama.cpp", "e", loaded_at=NOW - 65, ttl_s=60.0)
    long = Replica("ollama", "f", loaded_at=0.0, ttl_s=3600.0)
    actions = plan((), (active, recent, stale, never_used, short, long), POLICY, NOW)
    assert actions == (
        Unload("llama.cpp", "e", "idle for 65 s (TTL 60 s)"),
        Unload("ollama", "c", "idle for 5 min (TTL 5 min)"),
        Unload("ollama", "d", "idle for 5 min (TTL 5 min)"),
    )


def test_a_model_being_scaled_up_is_not_unloaded() -> None:
    idle = Replica("ollama", "qwen2.5:7b", loaded_at=0.0)
    assert plan((_view(),), (idle,), POLICY, NOW) == (
        Unload("ollama", "qwen2.5:7b", "idle for 17 min (TTL 5 min)"),
    )
    hot = _view(*_waits([(3, 90.0), (1, 90.0)]))
    assert all(isinstance(a, Load) for a in plan((hot,), (idle,), POLICY, NOW))


def test_durations_read_as_people_say_them() -> None:
    assert [format_duration(s) for s in (0.0, 2.5, 9.96, 18.4, 119.0, 300.0, 330.0, 7200.0)] == [
        "0 s",
        "2.5 s",
        "10 s",
        "18 s",
        "119 s",
        "5 min",
        "5.5 min",
        "2 h",
    ]


# The never-rules on fixed inputs (the property test tries random ones)


def test_the_users_models_are_never_unloaded() -> None:
    resident = _host("gpu-box", resident=True)  # the user's load: not in ``held``
    assert plan((_view(hosts=(resident,)),), (), POLICY, NOW + 10**6) == ()


def test_another_model_with_work_is_never_evicted() -> None:
    slow = _waits([(3, 90.0), (1, 90.0)])
    swap = _host("gpu-2", engine="llama.cpp", single_model=True, other_busy=True)
    full = _host("laptop", other_busy=True, free_bytes=1 * GIB, model_bytes=5 * GIB)
    assert (
        plan((_view(*slow, hosts=(_host("gpu-box", resident=True), swap, full)),), (), POLICY, NOW)
        == ()
    )
