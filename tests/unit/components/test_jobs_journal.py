"""A broker that starts applies the job ends its killed predecessor's workers journaled: a job
the store has unfinished ends as journaled, a finished one never changes, a torn line is
skipped, and the files go once what they said is stored."""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec.structs import replace

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.journal import JournalFolders, read_left, settle
from backend.components.jobs.state import Job
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind
from tests.fakes import FakeClock
from tests.unit.components.jobs_rig import running


def _end(number: int, kind: JobEventKind = "completed", seq: int = 3) -> JobEvent:
    return JobEvent(
        key=JobKey(f"me/run1/{number}"),
        seq=seq,
        kind=kind,
        attempt=1,
        at=150.0,
        engine=EngineName("ollama"),
        model="llama3",
        origin=NodeId("me"),
        run_id="run1",
        created_at=100.0 + number,
        path="/api/chat",
        error="cut" if kind == "errored" else None,
    )


def _running(number: int) -> Job:
    return Job(
        id=JobKey(f"me/run1/{number}"),
        engine=EngineName("ollama"),
        model="llama3",
        origin=NodeId("me"),
        created_at=100.0 + number,
        state="running",
        attempt=1,
        target=NodeId("me"),
        serving=NodeId("me"),
        started_at=120.0,
        seq=2,
        run_id="run1",
        path="/api/chat",
    )


def _write(path: Path, *events: JobEvent, torn: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(msgspec.json.encode(event) + b"\n" for event in events) + torn)


def test_the_ends_earlier_runs_left_are_read_in_order_and_a_torn_line_is_skipped(
    tmp_path: Path,
) -> None:
    folders = JournalFolders(tmp_path, tmp_path / "now")
    _write(tmp_path / "old" / "run1.2.jsonl", _end(3), torn=b'{"key":"me/run1/4","se')
    _write(tmp_path / "old" / "run1.1.jsonl", _end(1), _end(2))
    _write(tmp_path / "now" / "run2.1.jsonl", _end(9))  # this run's worker writes there
    left = read_left(folders)
    assert [end.key for end in left.ends] == ["me/run1/1", "me/run1/2", "me/run1/3"]
    left.remove()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["now"]
    assert (tmp_path / "now" / "run2.1.jsonl").exists()


def test_no_journal_folder_is_nothing_left(tmp_path: Path) -> None:
    left = read_left(JournalFolders.for_new_run(tmp_path / "absent"))
    assert (left.ends, left.files) == ([], [])


def test_an_end_finishes_an_unfinished_job_and_never_changes_a_finished_one() -> None:
    completed = replace(_running(2), state="completed", completed_at=140.0, seq=3)
    jobs = {job.id: job for job in (_running(1), completed)}
    settled = settle(jobs, [_end(1), _end(2, "errored"), _end(1, "errored", seq=4)])
    assert list(settled) == ["me/run1/1"]
    ended = settled[JobKey("me/run1/1")]
    assert replace(ended, timeline=()) == replace(
        _running(1), state="completed", completed_at=150.0, seq=3
    )
    assert [step.seq for step in ended.timeline] == [3]


def test_a_job_the_store_lacks_is_recorded_from_its_end_and_a_bad_one_skipped() -> None:
    settled = settle({}, [_end(5, "errored"), _end(6, seq=0), _end(7, "started")])
    assert list(settled) == ["me/run1/5"]
    job = settled[JobKey("me/run1/5")]
    assert (job.state, job.error, job.model, job.created_at) == ("failed", "cut", "llama3", 105.0)


async def test_a_broker_starting_stores_the_journaled_ends_then_deletes_them(
    store: Store, tmp_path: Path
) -> None:
    table = JobRecordStore(store)
    await table.save([(_running(1), 130.0), (_running(2), 130.0)])
    folders = JournalFolders.for_new_run(tmp_path / "jobs-journal")
    segment = tmp_path / "jobs-journal" / "earlier" / "run1.1.jsonl"
    _write(segment, _end(1), torn=b'{"key":"me/run1/2","seq":3,"kind":"comp')
    jobs = JobsComponent(
        store=table,
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
        journal=folders,
    )
    async with running(jobs):
        assert not segment.exists() and not segment.parent.exists()
        stored = {job.id: job for job in await table.load()}
    assert stored[JobKey("me/run1/1")].state == "completed"
    # No end journaled: left unfinished by the broker that was killed, as before.
    assert stored[JobKey("me/run1/2")].state == "failed"
    assert jobs.journal_dir == folders.current


def _event(number: int, kind: JobEventKind, seq: int) -> JobEvent:
    return msgspec.structs.replace(
        _end(number, kind, seq), target=NodeId("me"), node=NodeId("me"), error=None
    )


async def test_a_worker_that_exits_has_its_journaled_ends_applied_before_the_rest_fail(
    store: Store, tmp_path: Path
) -> None:
    """A worker tells the broker a job's end after the client's last byte; killed in between,
    its journal (in this broker run's folder) still says how the job ended."""
    folders = JournalFolders.for_new_run(tmp_path / "jobs-journal")
    jobs = JobsComponent(
        store=JobRecordStore(store),
        clock=FakeClock(1_000.0, on_sleep="brief"),
        node_id="me",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
        journal=folders,
    )
    async with running(jobs):
        for number in (1, 2, 3, 4):  # what the worker's pipe brought: each job running
            jobs.record_external([_event(number, "submitted", 1), _event(number, "started", 2)])
        jobs.record_external([_event(5, "submitted", 1)])  # its start only journaled
        # Its last writes: job 1's end reached the pipe too; 2 and 3 only the journal.
        jobs.record_external([_end(1)])
        journaled = (_end(1), _end(2), _end(3, "errored"), _event(5, "started", 2))
        _write(folders.current / "w1.1.jsonl", *journaled)
        jobs.fail_unfinished("the proxy worker exited", keep={"me/run1/4"})
        states = {job.key: (job.state, job.error) for job in jobs.records(10)}
        fifth = jobs.details(JobKey("me/run1/5"))
    assert states[JobKey("me/run1/1")] == ("completed", None)
    assert states[JobKey("me/run1/2")] == ("completed", None), "its client had the answer"
    assert states[JobKey("me/run1/3")] == ("failed", "cut")
    assert states[JobKey("me/run1/4")] == ("running", None), "kept: it waits for the next worker"
    assert states[JobKey("me/run1/5")] == ("failed", "the proxy worker exited")
    assert fifth.job.started_at == 150.0, "the engine had started it: the journal says so"
