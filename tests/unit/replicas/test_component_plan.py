"""The replicas component with the real planner: a burst on one model loads it on the member
that has its weights on disk (by digest, under another name), an idle replica held here is
unloaded once past its TTL, and where the requests waited is named in the reason."""

from __future__ import annotations

import asyncio

from backend.components.replicas.plan import plan
from backend.protocol.proxy import DemandReport, LocalUse, ModelDemand
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineModels, ReplicaMark
from tests.fakes import settle
from tests.unit.replicas.component_rig import DIGEST, MEMBER, build

OLLAMA = EngineName("ollama")


def burst(at: float) -> DemandReport:
    """Three requests for ``qwen2.5:7b`` that would wait 40 s on this node (the laptop)."""
    demand = ModelDemand(
        model="qwen2.5:7b", digest=DIGEST, requests=3, wait_s=40.0, queued=3, owners=["node-me"]
    )
    return DemandReport(at=at, models=[demand])


async def test_a_burst_loads_a_replica_on_the_member_with_the_weights() -> None:
    rig = build(planner=plan, models_read_nowait=True)  # the engines' last sweep, as wired
    rig.clock.on_sleep = "wait"
    task = asyncio.create_task(rig.component.run(), name="replicas")
    await settle()
    try:
        for _ in range(4):
            rig.component.on_demand(burst(rig.clock.now))
            await rig.clock.advance(2.0)
    finally:
        await rig.component.stop()
        await asyncio.wait_for(task, 5)
    (params,) = rig.engines.forwarded
    assert (params.node, params.engine, params.model, params.replica) == (
        MEMBER,
        "llamacpp",
        "qwen2.5-7b-instruct-q4_k_m.gguf",
        True,
    )
    assert params.reason is not None and "laptop" in params.reason
    assert [(e.kind, e.path) for e in rig.jobs][-1] == ("completed", "replica:load")


async def test_an_idle_replica_is_unloaded_after_its_ttl_and_a_used_one_is_not() -> None:
    rig = build(planner=plan)
    now = rig.clock.now
    mark = ReplicaMark(loaded_at=now - 1000, reason="asked by gpu-box", ttl_s=120.0)
    both = ["qwen2.5:7b", "llama3:8b"]
    rig.engines.models = EngineModels(
        models=both,
        by_engine={OLLAMA: both},
        loaded_by_engine={OLLAMA: both},
        slots_by_engine={},
        replicas_by_engine={OLLAMA: {"qwen2.5:7b": mark, "llama3:8b": mark}},
    )
    rig.component.on_demand(
        DemandReport(
            at=now,
            local=[
                LocalUse(engine="ollama", model="qwen2.5:7b", last_used_at=now - 500),
                LocalUse(engine="ollama", model="llama3:8b", last_used_at=now - 30),
            ],
        )
    )
    rig.clock.on_sleep = "wait"
    task = asyncio.create_task(rig.component.run(), name="replicas")
    await settle()
    try:
        await rig.clock.advance(2.0)
    finally:
        await rig.component.stop()
        await asyncio.wait_for(task, 5)
    assert [(p.action, p.model) for p in rig.engines.local] == [("unload_model", "qwen2.5:7b")]
    assert rig.jobs[-1].note is not None and "idle" in rig.jobs[-1].note


async def test_waits_heard_while_off_load_nothing_once_turned_on_but_a_new_burst_does() -> None:
    rig = build(mode="off", planner=plan, models_read_nowait=True)
    rig.clock.on_sleep = "wait"
    task = asyncio.create_task(rig.component.run(), name="replicas")
    await settle()
    try:
        for _ in range(4):  # a burst while the planner is off: heard, not acted on
            rig.component.on_demand(burst(rig.clock.now))
            await rig.clock.advance(2.0)
        assert rig.engines.forwarded == []
        rig.settings.replicas_mode = "on"
        rig.component.inputs_changed()  # as the settings' listener says
        for _ in range(3):  # turned on: the old waits describe a cluster it did not watch
            await rig.clock.advance(2.0)
        assert rig.engines.forwarded == []
        for _ in range(4):  # a new burst, heard while on, loads the replica
            rig.component.on_demand(burst(rig.clock.now))
            await rig.clock.advance(2.0)
    finally:
        await rig.component.stop()
        await asyncio.wait_for(task, 5)
    (params,) = rig.engines.forwarded
    assert (params.node, params.model, params.replica) == (
        MEMBER,
        "qwen2.5-7b-instruct-q4_k_m.gguf",
        True,
    )
