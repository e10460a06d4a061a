"""The replicas component around a scripted planner: what it gives the planner (demand, hosts
found by digest, replicas held), how it carries out loads and unloads (forwarded to a member,
one at a time, a failed one not retried at once), its status, and when it does nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from backend.components.replicas.plan import Load, Unload
from backend.protocol.proxy import DemandReport, LocalUse, ModelDemand
from backend.protocol.types.engines import ReplicaMark
from tests.fakes import settle
from tests.unit.replicas.component_rig import (
    DIGEST,
    GIB,
    MEMBER,
    Rig,
    build,
    member,
    own_models,
)

REASON = "qwen2.5:7b waited 18 s on laptop; loading it on gpu-box"
LOAD = Load(
    model="qwen2.5:7b",
    node_id=MEMBER,
    node_name="gpu-box",
    engine="llamacpp",
    name="qwen2.5-7b-instruct-q4_k_m.gguf",
    reason=REASON,
)


@asynccontextmanager
async def running(rig: Rig) -> AsyncIterator[None]:
    """The component's loop running on the rig's clock (each ``advance(2)`` is one round)."""
    rig.clock.on_sleep = "wait"
    task = asyncio.create_task(rig.component.run(), name="replicas")
    await settle()
    try:
        yield
    finally:
        await rig.component.stop()
        await asyncio.wait_for(task, 5)


def hot(at: float, wait_s: float = 18.0) -> DemandReport:
    """A report of one slow request for ``qwen2.5:7b``."""
    model = ModelDemand(model="qwen2.5:7b", digest=DIGEST, requests=1, wait_s=wait_s, queued=2)
    return DemandReport(at=at, models=[model])


async def test_a_high_wait_loads_on_the_member_the_planner_names() -> None:
    rig = build()
    rig.planner.answer = (LOAD,)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
    (views, held, policy, _), *_ = rig.planner.calls
    (view,) = views
    assert [s.wait_s for s in view.samples] == [18.0]
    assert held == ()
    assert (policy.target_wait_s, policy.ttl_s, policy.max_per_model) == (5.0, 120.0, 2)
    by_node = {host.node_id: host for host in view.hosts}
    there = by_node[MEMBER]
    # The member's llama.cpp has the same weights under its own name (found by digest).
    assert (there.name, there.on_disk, there.resident, there.single_model) == (
        "qwen2.5-7b-instruct-q4_k_m.gguf",
        True,
        False,
        True,
    )
    assert (there.free_bytes, there.model_bytes) == (20 * GIB, 5 * GIB)
    assert by_node["node-me"].resident
    (params,) = rig.engines.forwarded
    assert (params.node, params.engine, params.action, params.model) == (
        MEMBER,
        "llamacpp",
        "load_model",
        "qwen2.5-7b-instruct-q4_k_m.gguf",
    )
    assert (params.replica, params.reason, params.ttl_s) == (True, REASON, 120.0)
    assert rig.engines.local == []
    (info,) = rig.component.status().replicas
    assert (info.node_id, info.state, info.reason, info.model) == (
        MEMBER,
        "ready",
        REASON,
        "qwen2.5:7b",
    )


async def test_a_failed_load_is_not_retried_before_a_minute() -> None:
    rig = build()
    rig.planner.answer = (LOAD,)
    rig.engines.fail_with = RuntimeError("out of memory")
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        for _ in range(5):
            await rig.clock.advance(2.0)
        assert len(rig.engines.forwarded) == 1
        (info,) = rig.component.status().replicas
        assert (info.state, info.error) == ("failed", "out of memory")
        await rig.clock.advance(52.0)
        assert len(rig.engines.forwarded) == 2
    assert [event.kind for event in rig.jobs] == ["submitted", "started", "errored"] * 2
    assert rig.jobs[2].error == "out of memory"


async def test_one_load_per_member_at_a_time() -> None:
    rig = build()
    rig.engines.gate = asyncio.Event()  # the load takes a while
    other = Load(LOAD.model, MEMBER, "gpu-box", "ollama", "qwen2.5:7b", REASON)
    rig.planner.answer = (LOAD, other)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
        await rig.clock.advance(2.0)
        assert len(rig.engines.forwarded) == 1
        assert all(h.loading for h in rig.planner.calls[-1][0][0].hosts if h.node_id == MEMBER)
        rig.engines.gate.set()
        await settle()
        await rig.clock.advance(2.0)
        # Done, but the member's node-info does not list it yet: it still counts as loading.
        assert len(rig.engines.forwarded) == 1
        rig.nodes[0] = member(loaded=["qwen2.5-7b-instruct-q4_k_m.gguf"])
        rig.planner.answer = (other,)
        await rig.clock.advance(2.0)
    assert [p.engine for p in rig.engines.forwarded] == ["llamacpp", "ollama"]


async def test_a_loaded_replica_the_member_never_lists_is_dropped_after_a_while() -> None:
    rig = build()
    rig.planner.answer = (LOAD,)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
        for _ in range(14):
            await rig.clock.advance(2.0)
        assert len(rig.engines.forwarded) == 1
        await rig.clock.advance(4.0)
        assert len(rig.engines.forwarded) == 2


async def test_an_idle_replica_held_here_is_unloaded_with_its_reason() -> None:
    mark = ReplicaMark(loaded_at=999_000.0, reason="qwen2.5:7b waited", by=None, ttl_s=120.0)
    rig = build(models=own_models({"qwen2.5:7b": mark}))
    use = LocalUse(engine="ollama", model="qwen2.5:7b", last_used_at=999_500.0, active=0)
    rig.component.on_demand(DemandReport(at=rig.clock.now, local=[use]))
    rig.component.on_demand(hot(rig.clock.now, wait_s=0.0))
    why = "qwen2.5:7b idle for 500 s; unloading it from laptop"
    rig.planner.answer = (Unload(engine="ollama", name="qwen2.5:7b", reason=why),)
    async with running(rig):
        await rig.clock.advance(2.0)
    (_, held, _, _), *_ = rig.planner.calls
    (replica,) = held
    assert (replica.engine, replica.name, replica.loaded_at) == ("ollama", "qwen2.5:7b", 999_000.0)
    assert (replica.last_used_at, replica.active, replica.ttl_s) == (999_500.0, 0, 120.0)
    (params,) = rig.engines.local
    assert (params.action, params.engine, params.model, params.node) == (
        "unload_model",
        "ollama",
        "qwen2.5:7b",
        None,
    )
    assert [(e.kind, e.path, e.note) for e in rig.jobs] == [
        ("submitted", "replica:unload", why),
        ("started", "replica:unload", why),
        ("completed", "replica:unload", why),
    ]


async def test_status_lists_held_replicas_and_the_limits() -> None:
    mark = ReplicaMark(loaded_at=999_000.0, reason="asked by gpu-box", by=None, ttl_s=120.0)
    rig = build(models=own_models({"qwen2.5:7b": mark}))
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now, wait_s=0.0))
        await rig.clock.advance(2.0)
    status = rig.component.status()
    assert (status.mode, status.active, status.target_wait_s, status.ttl_s) == (
        "on",
        True,
        5.0,
        120.0,
    )
    assert status.max_per_model == 2
    (info,) = status.replicas
    assert (info.node_id, info.name, info.state, info.reason) == (
        "node-me",
        "qwen2.5:7b",
        "ready",
        "asked by gpu-box",
    )


async def test_mode_off_does_nothing() -> None:
    rig = build(mode="off")
    rig.planner.answer = (LOAD,)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
    assert rig.planner.calls == []
    assert rig.engines.forwarded == []
    assert not rig.component.status().active


async def test_auto_acts_only_while_another_member_is_trusted() -> None:
    rig = build(mode="auto", members=("node-me",))
    rig.planner.answer = (LOAD,)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
        assert rig.planner.calls == []
        assert not rig.component.status().active
        rig.members.append(MEMBER)
        rig.component.inputs_changed()  # as the cluster's trust change says
        await settle()  # the resting loop takes its next round's sleep
        await rig.clock.advance(2.0)
    assert len(rig.planner.calls) == 1
    assert rig.component.status().active
    assert len(rig.engines.forwarded) == 1


async def test_an_inactive_planner_rests_until_its_inputs_change() -> None:
    """No timer while nothing could make it active: one round finds it inactive, then the
    loop waits for the settings or the membership to change, not for the clock."""
    rig = build(mode="auto", members=("node-me",))
    rig.planner.answer = (LOAD,)
    async with running(rig):
        await rig.clock.advance(2.0)  # the first round: inactive
        rounds = len(rig.clock.sleeps)
        for _ in range(5):
            await rig.clock.advance(2.0)
        assert len(rig.clock.sleeps) == rounds  # no sleep since: it rests
        rig.component.inputs_changed()  # a change that leaves it inactive: one more round
        await settle()
        await rig.clock.advance(2.0)
        assert len(rig.clock.sleeps) == rounds + 1
        for _ in range(3):
            await rig.clock.advance(2.0)
        assert len(rig.clock.sleeps) == rounds + 1
        rig.component.on_demand(hot(rig.clock.now))
        rig.members.append(MEMBER)
        rig.component.inputs_changed()
        await settle()
        await rig.clock.advance(2.0)
        assert len(rig.planner.calls) == 1  # active again: planned a round later
        await rig.clock.advance(2.0)
        assert len(rig.planner.calls) == 2  # and every round after


async def test_settings_it_lacks_keep_the_planner_defaults() -> None:
    rig = build()
    rig.component._settings = object  # a settings view from before the replicas_* settings
    settings, active = rig.component.current()
    assert (settings.mode, active) == ("auto", True)
    assert settings.policy.target_wait_s == 10.0


async def test_a_failed_unload_waits_before_the_next_and_its_error_fades() -> None:
    mark = ReplicaMark(loaded_at=999_000.0, reason="asked", ttl_s=120.0)
    rig = build(models=own_models({"qwen2.5:7b": mark}))
    rig.engines.fail_with = RuntimeError("the engine is busy")
    rig.planner.answer = (Unload(engine="ollama", name="qwen2.5:7b", reason="idle"),)
    async with running(rig):
        for _ in range(5):
            await rig.clock.advance(2.0)
        assert len(rig.engines.local) == 1
        (info,) = [i for i in rig.component.status().replicas if i.state == "failed"]
        assert info.error == "the engine is busy"
        rig.planner.answer = ()
        await rig.clock.advance(600.0)
    assert len(rig.engines.local) == 1
    assert all(info.state != "failed" for info in rig.component.status().replicas)


async def test_a_planner_that_keeps_failing_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*_: object) -> tuple[Load, ...]:
        raise ValueError("no plan")

    rig = build(planner=broken)
    with caplog.at_level(logging.ERROR, "backend.components.replicas"):
        async with running(rig):
            rig.component.on_demand(hot(rig.clock.now))
            for _ in range(4):
                await rig.clock.advance(2.0)
    assert [r.message for r in caplog.records] == ["replicas: a planning round failed"]


async def test_a_load_under_way_when_the_planner_stops_ends_its_job() -> None:
    rig = build()
    rig.engines.gate = asyncio.Event()  # never set: the load is still under way at the stop
    rig.planner.answer = (LOAD,)
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
    assert [(e.kind, e.error) for e in rig.jobs][-1] == (
        "errored",
        "interrupted: the replica planner stopped",
    )


async def test_a_model_that_lands_on_another_member_gets_a_changed_time() -> None:
    rig = build()
    async with running(rig):
        rig.component.on_demand(hot(rig.clock.now))
        await rig.clock.advance(2.0)
        rig.nodes[0] = member(loaded=["qwen2.5-7b-instruct-q4_k_m.gguf"])
        landed = rig.clock.now + 2.0
        await rig.clock.advance(2.0)
        await rig.clock.advance(2.0)
    first, second, third = (call[0][0].changed_at for call in rig.planner.calls)
    assert (first, second, third) == (None, landed, landed)
