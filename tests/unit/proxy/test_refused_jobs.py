"""A request the door refuses itself is a queued-then-failed job with the door's message; a
flood of refusals lists at most the bound a second. A job's end carries what was measured
of its answer: when its first chunk went out and, for a stream, how many chunks it had."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from backend.protocol.proxy import ProxyTargets
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import MAX_ATTEMPTS, JobEvent
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.doors.refused import RefusedJobs, refuse_missing
from backend.workers.proxy.routing.failover import MAX_DISPATCHES


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _log() -> tuple[JobLog, list[JobEvent]]:
    sent: list[JobEvent] = []
    return JobLog(sent.extend, run_id="run1"), sent


def test_a_missing_model_is_answered_404_and_listed_as_a_failed_job() -> None:
    log, sent = _log()
    refused = RefusedJobs(log, _Clock())
    request = make_mocked_request("POST", "/api/chat")
    response = refuse_missing(refused, request, ProxyTargets(node_id="me"), "nope:1b")
    assert response.status == 404
    assert [(event.kind, event.seq) for event in sent] == [("submitted", 1), ("errored", 2)]
    assert sent[1].error == "model 'nope:1b' not found"
    assert (sent[1].model, sent[1].path, sent[1].origin) == ("nope:1b", "/api/chat", "me")


def test_refusals_beyond_the_bound_in_a_second_are_counted_not_listed() -> None:
    log, sent = _log()
    clock = _Clock()
    refused = RefusedJobs(log, clock, per_second=3)
    request = make_mocked_request("POST", "/v1/chat/completions")
    table = ProxyTargets(node_id="me")
    for _ in range(10):
        refused.record(request, table, "m", "busy")
    assert len([event for event in sent if event.kind == "errored"]) == 3
    assert refused.unlisted == 7
    clock.now += 1.0
    refused.record(request, table, "m", "busy")
    assert len([event for event in sent if event.kind == "errored"]) == 4
    assert refused.unlisted == 0


def test_a_stream_s_end_carries_its_first_chunk_time_and_chunk_count() -> None:
    log, sent = _log()
    job = log.new(origin=NodeId("me"), engine="ollama", model="m", path="/api/chat")
    job.submitted(1, NodeId("me"))
    job.first_chunk_at, job.chunks, job.streamed = 12.5, 30, True
    job.completed()
    end = sent[-1]
    assert (end.first_token_at, end.chunks, end.tokens) == (12.5, 30, None)
    assert sent[0].first_token_at is None


def test_a_whole_answer_s_chunks_are_not_reported_as_a_count() -> None:
    log, sent = _log()
    job = log.new(origin=NodeId("me"), engine="ollama", model="m", path="/api/chat")
    job.first_chunk_at, job.chunks, job.streamed = 12.5, 3, False
    job.failed("the engine answered 500")
    assert (sent[-1].first_token_at, sent[-1].chunks) == (12.5, None)


def test_the_attempts_shown_count_to_the_proxy_s_dispatch_budget() -> None:
    assert MAX_ATTEMPTS == MAX_DISPATCHES
