"""A job's details: its timeline (bounded), the answer's first byte, chunks and tokens from its
end, kept in the store across a restart and served by ``jobs:get``."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.reports import parse_report
from backend.components.jobs.state import (
    MAX_TIMELINE,
    Completed,
    Errored,
    Job,
    Started,
    Submitted,
    apply,
)
from backend.components.jobs.store import JobRecordStore
from backend.components.jobs.timeline import decode_timeline, encode_timeline
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import errors, methods
from backend.protocol.types.base import JobKey
from tests.fakes import FakeClock


def _job() -> Job:
    return Job(id="me/r/1", engine="ollama", model="llama3", origin="me", created_at=100.0)


def test_the_timeline_keeps_each_applied_event_in_order() -> None:
    job = _job()
    for step in (
        Submitted(1, 1, "a", 100.1),
        Started(2, 1, "a", 100.2),
        Submitted(3, 2, "b", 101.0),
        Started(4, 1, "a", 101.1),  # from the attempt the job left: not on its timeline
        Completed(5, 2, 102.0, first_token_at=101.5, chunks=40),
    ):
        job = apply(job, step)
    assert [(step.seq, type(step).__name__) for step in job.timeline] == [
        (1, "Submitted"),
        (2, "Started"),
        (3, "Submitted"),
        (5, "Completed"),
    ]
    assert (job.first_token_at, job.chunks, job.tokens) == (101.5, 40, None)


def test_a_job_retried_without_end_keeps_its_first_and_latest_events_only() -> None:
    job = _job()
    for seq in range(1, 200):
        job = apply(job, Submitted(seq, seq, "a", 100.0 + seq))
    assert len(job.timeline) == MAX_TIMELINE
    assert job.timeline[0].seq == 1
    assert job.timeline[-1].seq == 199
    assert job.timeline[1].seq == 199 - MAX_TIMELINE + 2


def test_a_failed_end_carries_what_was_measured_and_the_error() -> None:
    job = apply(
        apply(_job(), Submitted(1, 1, "a", 1.0)), Errored(2, 1, 3.0, "broke", False, 2.0, 7)
    )
    assert (job.state, job.error, job.first_token_at, job.chunks) == ("failed", "broke", 2.0, 7)


def test_an_end_report_with_negative_counts_reads_as_unknown() -> None:
    report = {
        **_report(1, "completed"),
        "first_token_at": 150.5,
        "chunks": -3,
        "tokens": 12,
    }
    parsed = parse_report(report)
    assert parsed is not None
    assert parsed[1] == Completed(1, 1, 151.0, 150.5, None, 12)


def test_the_stored_timeline_reads_back_the_same_and_damage_costs_only_the_timeline() -> None:
    timeline = (
        Submitted(1, 1, "a", 1.0),
        Started(2, 1, "a", 2.0),
        Errored(3, 1, 3.0, "the engine answered 500", cancelled=False),
    )
    assert decode_timeline(encode_timeline(timeline)) == timeline
    assert encode_timeline(()) is None
    assert decode_timeline("{not json") == ()


def _report(seq: int, kind: str, **more: object) -> dict[str, object]:
    return {
        "key": "me/run1/1",
        "seq": seq,
        "kind": kind,
        "attempt": 1,
        "at": 150.0 + seq,
        "engine": "ollama",
        "model": "llama3",
        "origin": "me",
        "run_id": "run1",
        "created_at": 100.0,
        "path": "/api/chat",
        **more,
    }


def _component(store: Store) -> JobsComponent:
    return JobsComponent(
        store=JobRecordStore(store),
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )


async def test_details_survive_a_restart_through_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        jobs = _component(store)
        jobs.on_job_event(_report(1, "submitted", target="me"))
        jobs.on_job_event(_report(2, "started", node="me"))
        jobs.on_job_event(_report(3, "completed", first_token_at=152.5, chunks=9, tokens=8))
        await jobs.write_pending()
        again = _component(store)
        await again._load_once()
        details = again.details(JobKey("me/run1/1"))
    finally:
        await store.close()
    assert [(step.kind, step.node) for step in details.timeline] == [
        ("submitted", "me"),
        ("started", "me"),
        ("completed", None),
    ]
    record = details.job
    assert (record.first_token_at, record.chunks, record.tokens) == (152.5, 9, 8)
    wire = msgspec.to_builtins(details)
    assert wire["job"]["chunks"] == 9


async def test_details_of_a_job_not_in_the_history_are_not_found(tmp_path: Path) -> None:
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        with pytest.raises(errors.NotFound):
            _component(store).details(JobKey("me/run1/404"))
    finally:
        await store.close()
