"""``JobsComponent.wait_stored`` (``proxy:jobs-stored``, after which a proxy worker deletes the
journal segments it confirmed): returns once every applied change is in the store, and the
callers that wait together share one write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.state import Job
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent
from tests.fakes import FakeClock


class CountedStore(JobRecordStore):
    """Counts its writes; each takes a moment, as a commit does."""

    saves = 0

    async def save(self, changed: Sequence[tuple[Job, float]]) -> None:
        self.saves += 1
        await asyncio.sleep(0.05)
        await super().save(changed)


def _jobs(table: JobRecordStore) -> JobsComponent:
    return JobsComponent(
        store=table,
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )


def _completed(jobs: JobsComponent, number: int) -> None:
    """A job that ended in one report, as the worker sends it."""
    event = JobEvent(
        key=JobKey(f"me/run1/{number}"),
        seq=1,
        kind="completed",
        attempt=1,
        at=101.0,
        engine=EngineName("ollama"),
        model="llama3",
        origin=NodeId("me"),
        run_id="run1",
        created_at=100.0 + number,
        path="/api/chat",
    )
    jobs.on_job_event(msgspec.to_builtins(event))


async def test_a_completed_job_is_in_the_store_once_wait_stored_returns(store: Store) -> None:
    jobs = _jobs(JobRecordStore(store))
    _completed(jobs, 1)
    await jobs.wait_stored()
    stored = await JobRecordStore(store).load()
    assert [(job.id, job.state) for job in stored] == [("me/run1/1", "completed")]


async def test_callers_waiting_together_share_one_write(store: Store) -> None:
    counted = CountedStore(store)
    jobs = _jobs(counted)
    for number in range(1, 6):
        _completed(jobs, number)
    await asyncio.gather(*(jobs.wait_stored() for _ in range(5)))
    assert counted.saves == 1
    await jobs.wait_stored()  # nothing new: no write at all
    assert counted.saves == 1
    assert len(await JobRecordStore(store).load()) == 5
