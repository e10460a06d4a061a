"""``pair jobs`` and ``pair jobs --follow`` on a replica planner's jobs: PAIR as the client and
the action with its note at the end of the line (after the error of a failed one)."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from backend.cli.jobs_command import HEADER, JobsFollower, format_job, format_jobs
from backend.protocol import methods
from backend.protocol.types.base import JobKey
from backend.protocol.types.jobs import JobRecord, JobsSnapshot, JobUpserted

NOW = 10_000.0
ORIGIN = "0f3c2a9e-1111-4222-8333-944455556666"
LAPTOP = "7b1d00c4-aaaa-4bbb-8ccc-9ddddeeeefff"
NOTE = "qwen2.5:7b waited 18 s on gpu-box; loading it on laptop"


def _replica_job(path: str = "replica:load", **fields: Any) -> JobRecord:
    base: dict[str, Any] = {
        "key": f"{ORIGIN}/run1/9",
        "engine": "ollama",
        "model": "qwen2.5:7b",
        "origin": ORIGIN,
        "run_id": "run1",
        "state": "completed",
        "created_at": NOW - 30.0,
        "seq": 4,
        "target": LAPTOP,
        "serving": LAPTOP,
        "started_at": NOW - 30.0,
        "completed_at": NOW - 21.5,
        "path": path,
        "note": NOTE,
    }
    base.update(fields)
    return JobRecord(**base)


def test_a_replica_load_reads_as_such_with_its_note() -> None:
    row = format_job(_replica_job(), NOW, {})
    assert row.endswith(f"Load replica: {NOTE}")
    assert row[HEADER.index("CLIENT") :].startswith("PAIR ")
    assert "replica:load" not in row


def test_an_unload_and_a_failed_load_say_what_and_why() -> None:
    unload = format_job(_replica_job("replica:unload", note="idle for 5 min"), NOW)
    assert unload.endswith("Unload replica: idle for 5 min")
    failed = format_job(_replica_job(state="failed", error="out of\nmemory"), NOW)
    assert failed.endswith(f"Load replica failed: out of memory — {NOTE}")


def test_a_request_keeps_its_error_and_no_note() -> None:
    request = _replica_job(path="/api/chat", note=None, client="loopback", error="boom")
    row = format_jobs([request], NOW)
    assert row.splitlines()[1].endswith("boom") and "replica" not in row


def test_follow_prints_the_note_on_the_line() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, now=lambda: NOW)
    follower.start(JobsSnapshot(seq=0, jobs=[]))
    running = _replica_job(state="running", completed_at=None)
    for seq, job in enumerate((running, _replica_job()), 1):
        event = JobUpserted(seq=seq, key=JobKey(job.key), job=job)
        follower.on_push(methods.JOBS_EVENT.name, msgspec.to_builtins(event))
    clock = time.strftime("%H:%M:%S", time.localtime(NOW))
    assert [line.split()[:2] for line in lines[-2:]] == [[clock, "run1/9"]] * 2
    assert all(line.endswith(f"Load replica: {NOTE}") for line in lines[-2:])
