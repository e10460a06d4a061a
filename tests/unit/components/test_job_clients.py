"""A job names who asked for it: a LAN API key's name or ``loopback``, and the source address,
from the worker's events to the jobs list and the store (a restart keeps them)."""

from __future__ import annotations

from typing import Any

import msgspec

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind, JobRecord
from backend.workers.proxy.channels.jobs import JobLog
from tests.fakes import FakeClock

KEY = JobKey("me/run1/1")


class Harness:
    """The jobs component over ``store``, fed reports as the worker sends them."""

    def __init__(self, store: Store) -> None:
        self.component = JobsComponent(
            store=JobRecordStore(store),
            clock=FakeClock(1_000.0),
            node_id="me",
            events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
        )

    def send(self, seq: int, kind: JobEventKind, **fields: Any) -> None:
        self.component.on_job_event(report(seq, kind, **fields))

    def job(self) -> JobRecord:
        return next(job for job in self.component.records(10) if job.key == KEY)


def report(seq: int, kind: JobEventKind, **fields: Any) -> Any:
    """A report of the job ``KEY`` as the proxy worker sends it."""
    event = JobEvent(
        key=KEY,
        seq=seq,
        kind=kind,
        attempt=1,
        at=100.0 + seq,
        engine=EngineName("ollama"),
        model="llama3",
        origin=NodeId("me"),
        run_id="run1",
        created_at=100.0,
        **fields,
    )
    return msgspec.to_builtins(event)


def test_every_event_of_a_job_names_its_client() -> None:
    sent: list[JobEvent] = []
    log = JobLog(sent.extend, run_id="run1")
    job = log.new(
        origin=NodeId("me"),
        engine=EngineName("ollama"),
        model="llama3",
        path="/api/chat",
        client=("guest laptop", "192.168.1.9"),
    )
    job.submitted(1, NodeId("me"))
    job.completed()
    assert [(e.client, e.client_address) for e in sent] == [("guest laptop", "192.168.1.9")] * 2
    served = log.new(origin=NodeId("member"), engine=EngineName("ollama"), model="m", path="/")
    served.submitted(1, NodeId("me"))
    assert (sent[-1].client, sent[-1].client_address) == (None, None), "a member's job"


async def test_the_jobs_list_and_the_store_keep_the_client(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="me", client="guest laptop", client_address="192.168.1.9")
    h.send(2, "completed")
    job = h.job()
    assert (job.client, job.client_address) == ("guest laptop", "192.168.1.9")
    await h.component.write_pending()
    loaded = await JobRecordStore(store).load()
    assert [(j.id, j.client, j.client_address) for j in loaded] == [
        (KEY, "guest laptop", "192.168.1.9")
    ]


def test_a_report_without_a_client_is_a_job_of_an_older_worker(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="me")
    assert (h.job().client, h.job().client_address) == (None, None)
