"""Job events as the proxy sends them, and the state the broker's reducer makes of them."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec

from backend.components.jobs.component import parse_report
from backend.components.jobs.state import Job as ReducerJob
from backend.components.jobs.state import apply_in_order
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import JobEvent, JobEvents
from backend.workers.proxy.channels.jobs import Job, JobLog


class _Sent:
    """Collects what the log hands to the broker, as the broker receives it: each batch as
    one ``proxy/jobs`` notification's parameters, decoded from the wire."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def __call__(self, events: list[JobEvent]) -> None:
        wire = msgspec.json.decode(msgspec.json.encode(JobEvents(events=events)))
        self.batches.append(wire["events"])

    @property
    def raw(self) -> list[Any]:
        return [params for batch in self.batches for params in batch]

    @property
    def events(self) -> list[JobEvent]:
        return [msgspec.convert(params, JobEvent) for params in self.raw]

    @property
    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]


def _job(log: JobLog, **overrides: str) -> Job:
    fields = {"origin": "node-a", "engine": "ollama", "model": "llama3", "path": "/api/chat"}
    return log.new(**{**fields, **overrides})


def test_keys_are_origin_run_and_a_number_counting_from_one() -> None:
    log = JobLog(_Sent(), run_id="r1")
    keys = [_job(log).key, _job(log, origin="node-b").key, _job(log).key]
    assert keys == ["node-a/r1/1", "node-b/r1/2", "node-a/r1/3"]


def test_each_run_gets_its_own_id_unless_given() -> None:
    first, second = JobLog(_Sent()), JobLog(_Sent())
    assert first.run_id and second.run_id and first.run_id != second.run_id
    assert _job(first).key == f"node-a/{first.run_id}/1"


def test_a_peer_job_keeps_the_key_it_was_given_and_mints_no_number() -> None:
    log = JobLog(_Sent(), run_id="r1")
    assert _job(log, key="node-b/r9/4@2").key == "node-b/r9/4@2"
    assert _job(log).key == "node-a/r1/1"


def test_seq_counts_from_one_per_job() -> None:
    sent = _Sent()
    log = JobLog(sent, run_id="r1")
    first, second = _job(log), _job(log)
    first.submitted(1, "node-a")
    second.submitted(1, "node-b")
    first.started("node-a")
    second.started("node-b")
    first.completed()
    by_key: dict[str, list[int]] = {}
    for event in sent.events:
        by_key.setdefault(event.key, []).append(event.seq)
    assert by_key == {first.key: [1, 2, 3], second.key: [1, 2]}


def test_every_event_decodes_as_a_job_event_and_repeats_the_header() -> None:
    sent = _Sent()
    log = JobLog(sent, run_id="r1")
    job = _job(log)
    job.submitted(1, "node-b")
    job.started("node-b")
    job.failed("boom")
    for raw in sent.raw:
        event = msgspec.json.decode(msgspec.json.encode(raw), type=JobEvent)
        assert (event.key, event.engine, event.model, event.origin, event.run_id) == (
            job.key,
            "ollama",
            "llama3",
            "node-a",
            "r1",
        )
        assert (event.path, event.created_at) == ("/api/chat", job.created_at)
    submitted, started, errored = sent.events
    assert (submitted.kind, submitted.attempt, submitted.target) == ("submitted", 1, "node-b")
    assert (started.kind, started.attempt, started.node) == ("started", 1, "node-b")
    assert (errored.kind, errored.error, errored.cancelled) == ("errored", "boom", False)


def test_started_is_sent_once_per_attempt() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.started("node-a")
    job.started("node-a", 1)
    job.submitted(2, "node-b")
    job.started("node-b", 2)
    job.started("node-b")
    assert sent.kinds == ["submitted", "started", "submitted", "started"]
    assert [e.attempt for e in sent.events] == [1, 1, 2, 2]


def test_started_for_an_attempt_the_job_left_is_ignored() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.submitted(2, "node-b")
    job.started("node-a", 1)
    assert sent.kinds == ["submitted", "submitted"]
    job.started("node-b", 2)
    assert sent.events[-1].node == "node-b"


def test_only_the_first_terminal_event_is_sent() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.completed()
    job.failed("too late")
    job.cancelled("too late")
    job.completed()
    assert sent.kinds == ["submitted", "completed"]
    assert job.finished


def test_cancelled_is_an_error_marked_cancelled() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.cancelled("the client disconnected")
    event = sent.events[-1]
    assert (event.kind, event.error, event.cancelled) == (
        "errored",
        "the client disconnected",
        True,
    )


def _reduce(raw: list[Any]) -> ReducerJob:
    """The broker's state for one job from its reports, in the order they arrive."""
    parsed = [parse_report(params) for params in raw]
    assert all(item is not None for item in parsed)
    reports = [item for item in parsed if item is not None]
    first = reports[0][0]
    job = ReducerJob(
        id=first.key,
        engine=first.engine,
        model=first.model,
        origin=first.origin,
        created_at=first.created_at,
        run_id=first.run_id,
        path=first.path,
    )
    waiting: list[Any] = []
    for _, step in reports:
        job, waiting = apply_in_order(job, [*waiting, step])
    assert waiting == []
    return job


def _failover(sent: _Sent) -> Job:
    """Attempt 1 runs on node-a and breaks; a round later attempt 2 completes on node-b."""
    job = _job(JobLog(sent, run_id="r1"))
    job.submitted(1, "node-a")
    job.started("node-a")
    job.submitted(2, None)  # waiting for the next round
    job.started("node-a", 1)  # a late report from the attempt it left
    job.submitted(2, "node-b")
    job.started("node-b", 2)
    job.completed()
    return job


def test_a_failover_reads_completed_on_the_second_node_at_the_broker() -> None:
    sent = _Sent()
    job = _failover(sent)
    assert sent.kinds == ["submitted", "started", "submitted", "submitted", "started", "completed"]
    state = _reduce(sent.raw)
    assert (state.id, state.state, state.attempt) == (job.key, "completed", 2)
    assert (state.target, state.serving, state.seq) == ("node-b", "node-b", 6)
    assert state.started_at == sent.events[4].at


def test_a_failover_reads_the_same_whatever_order_the_reports_arrive_in() -> None:
    sent = _Sent()
    _failover(sent)
    expected = _reduce(sent.raw)
    shuffled = list(sent.raw)
    random.Random(7).shuffle(shuffled)
    assert shuffled != sent.raw
    assert _reduce(shuffled) == expected
    assert _reduce(list(reversed(sent.raw))) == expected


def test_a_job_that_fails_over_and_then_fails_reads_failed_with_the_error() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.started("node-a")
    job.submitted(2, "node-b")
    job.failed("the stream ended without the engine's final marker")
    job.completed()
    state = _reduce(sent.raw)
    assert (state.state, state.attempt, state.target, state.serving) == (
        "failed",
        2,
        "node-b",
        None,
    )
    assert state.error == "the stream ended without the engine's final marker"


def test_a_cancelled_job_reads_cancelled_at_the_broker() -> None:
    sent = _Sent()
    job = _job(JobLog(sent))
    job.submitted(1, "node-a")
    job.started("node-a")
    job.cancelled("the client stopped reading")
    state = _reduce(sent.raw)
    assert (state.state, state.serving, state.error) == (
        "cancelled",
        "node-a",
        "the client stopped reading",
    )


async def test_a_batching_log_sends_a_request_s_events_together_and_in_order() -> None:
    sent = _Sent()
    log = JobLog(sent, run_id="r1", flush_s=0.02)
    job = _job(log)
    job.submitted(1, NodeId("n1"))
    job.started(NodeId("n1"))
    assert sent.raw == [], "an event left before the batch was due"
    await asyncio.sleep(0.05)
    assert sent.kinds == ["submitted", "started"]
    assert len(sent.batches) == 1, "a batch's events go in one notification"
    other = _job(log)
    other.submitted(1, NodeId("n1"))
    assert len(sent.raw) == 2
    job.completed()  # a job's end goes at once, with what waited before it
    assert [(e.kind, e.seq) for e in sent.events[2:]] == [("submitted", 1), ("completed", 3)]
    third = _job(log)
    third.submitted(1, NodeId("n1"))
    third.failed("boom")
    assert [(e.kind, e.seq) for e in sent.events[4:]] == [("submitted", 1), ("errored", 2)]
    assert [len(batch) for batch in sent.batches] == [2, 2, 2]
    await asyncio.sleep(0.05)
    assert len(sent.batches) == 3, "nothing was left to send"
