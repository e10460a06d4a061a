"""The replica planner's loads and unloads as jobs: recorded through the real jobs component
over a real store, with the reason as the note, listed and read back from the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec
import pytest

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.store import JobRecordStore
from backend.components.replicas.plan import Load
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.proxy import DemandReport, ModelDemand
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobRecord
from tests.fakes import FakeClock, settle
from tests.unit.components.jobs_rig import running
from tests.unit.replicas.component_rig import DIGEST, MEMBER, build

REASON = "qwen2.5:7b waited 18 s on laptop; loading it on gpu-box"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """The broker's database, migrated, in the test's folder."""
    opened = Store(tmp_path / "pair.db")
    await opened.open()
    yield opened
    await opened.close()


async def test_a_replica_load_is_a_job_with_its_reason(store: Store) -> None:
    jobs = JobsComponent(
        store=JobRecordStore(store),
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="node-me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )
    recorded: list[JobEvent] = []

    def record(events: Sequence[JobEvent]) -> None:
        recorded.extend(events)
        jobs.record_external(events)  # as the broker wires it

    rig = build(record_jobs=record)
    rig.planner.answer = (
        Load("qwen2.5:7b", MEMBER, "gpu-box", "llamacpp", "qwen2.5-7b.gguf", REASON),
    )
    async with running(jobs):
        rig.clock.on_sleep = "wait"
        task = asyncio.create_task(rig.component.run(), name="replicas")
        await settle()
        demand = ModelDemand(model="qwen2.5:7b", digest=DIGEST, requests=1, wait_s=18.0)
        rig.component.on_demand(DemandReport(at=rig.clock.now, models=[demand]))
        await rig.clock.advance(2.0)
        await rig.component.stop()
        await asyncio.wait_for(task, 5)
        (job,) = jobs.records(10)
        await jobs.wait_stored()
    assert (job.path, job.state, job.note, job.model, job.engine) == (
        "replica:load",
        "completed",
        REASON,
        "qwen2.5:7b",
        "llamacpp",
    )
    assert (job.origin, job.target, job.serving) == ("node-me", MEMBER, MEMBER)
    assert job.key == recorded[0].key
    (stored,) = await JobRecordStore(store).load()
    assert (stored.id, stored.note, stored.state) == (job.key, REASON, "completed")


async def test_an_event_the_reducer_cannot_take_is_dropped(store: Store) -> None:
    jobs = JobsComponent(
        store=JobRecordStore(store),
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="node-me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )
    event = JobEvent(
        key=JobKey("node-me/replicas-1/1"),
        seq=0,
        kind="submitted",
        attempt=0,
        at=1.0,
        engine=EngineName("ollama"),
        model="qwen2.5:7b",
        origin=NodeId("node-me"),
        run_id="replicas-1",
        created_at=1.0,
        path="replica:load",
        note=REASON,
    )
    async with running(jobs):
        jobs.record_external([event])
        assert jobs.records(10) == []
        jobs.record_external([msgspec.structs.replace(event, seq=1)])
        (job,) = jobs.records(10)
    assert (job.state, job.note) == ("in_flight", REASON)


async def test_a_members_replica_job_keeps_its_note_here(store: Store) -> None:
    jobs = JobsComponent(
        store=JobRecordStore(store),
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="node-me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )
    record = JobRecord(
        key=JobKey(f"{MEMBER}/replicas-1/1"),
        engine=EngineName("ollama"),
        model="qwen2.5:7b",
        origin=NodeId(MEMBER),
        run_id="replicas-1",
        state="completed",
        created_at=1.0,
        seq=3,
        path="replica:unload",
        note="idle for 5 min",
    )
    async with running(jobs):
        assert jobs.mirror(NodeId(MEMBER), [record], complete=True) == 1
        (job,) = jobs.records(10)
        await jobs.wait_stored()
    assert job.note == "idle for 5 min"
    (stored,) = await JobRecordStore(store).load()
    assert stored.note == "idle for 5 min"
