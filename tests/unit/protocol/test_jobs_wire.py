"""The jobs list's payloads keep their former field names on the wire (``workloads`` in a
snapshot, ``workload`` in an upsert), so earlier members and clients still read them."""

from __future__ import annotations

import msgspec

from backend.protocol import methods
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobRecord, JobsSnapshot, JobUpserted

RECORD = JobRecord(
    key=JobKey("n1/run1/1"),
    engine=EngineName("ollama"),
    model="qwen3",
    origin=NodeId("n1"),
    run_id="run1",
    state="running",
    created_at=100.0,
    seq=2,
)


def test_a_snapshot_lists_its_jobs_under_workloads() -> None:
    encoded = msgspec.json.decode(msgspec.json.encode(JobsSnapshot(seq=7, jobs=[RECORD])))
    assert set(encoded) == {"seq", "workloads"}
    assert encoded["workloads"][0]["key"] == "n1/run1/1"
    decoded = methods.JOBS_SUBSCRIBE.decode_result(encoded)
    assert decoded == JobsSnapshot(seq=7, jobs=[RECORD])


def test_an_upsert_carries_its_job_under_workload() -> None:
    upsert = JobUpserted(seq=3, key=RECORD.key, job=RECORD)
    encoded = msgspec.json.decode(msgspec.json.encode(upsert))
    assert set(encoded) == {"seq", "event", "key", "workload"}
    assert encoded["event"] == "upsert"
    assert encoded["workload"]["state"] == "running"
    assert methods.JOBS_EVENT.decode(encoded) == upsert
