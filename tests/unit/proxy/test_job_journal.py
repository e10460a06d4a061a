"""The worker's journal of job ends: one line per end, private files, segments sealed by size
and deleted only once the broker confirmed it stored what they hold."""

from __future__ import annotations

import asyncio
import contextlib
import random
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from backend.protocol import errors
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.channels.journal import JobJournal
from backend.workers.proxy.service import ProxyService
from tests.fakes import FakeClock


def _event(number: int, kind: JobEventKind = "completed") -> JobEvent:
    return JobEvent(
        key=JobKey(f"me/run1/{number}"),
        seq=2,
        kind=kind,
        attempt=1,
        at=101.0,
        engine=EngineName("ollama"),
        model="llama3",
        origin=NodeId("me"),
        run_id="run1",
        created_at=100.0,
        path="/api/chat",
        error="cut" if kind == "errored" else None,
    )


def _lines(path: Path) -> list[JobEvent]:
    return [msgspec.json.decode(line, type=JobEvent) for line in path.read_bytes().splitlines()]


def test_an_end_is_one_line_of_the_event_in_a_private_file(tmp_path: Path) -> None:
    folder = tmp_path / "journal" / "broker-run"
    journal = JobJournal(folder, "run1")
    journal.append(_event(1))
    journal.append(_event(2, "errored"))
    assert _lines(journal.live) == [_event(1), _event(2, "errored")]
    assert journal.live.name == "run1.1.jsonl"
    assert stat.S_IMODE(journal.live.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    journal.close()


def test_the_job_log_journals_starts_and_ends_only_before_sending_them(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path, "run1")
    seen: list[list[str]] = []

    def notify(events: list[JobEvent]) -> None:  # what the journal held when the broker was told
        seen.append([event.kind for event in _lines(journal.live)])

    log = JobLog(notify, run_id="run1", journal=journal)
    job = log.new(origin=NodeId("me"), engine=EngineName("ollama"), model="m", path="/api/chat")
    job.submitted(1, NodeId("me"))
    job.started(NodeId("me"))
    job.completed()
    assert seen == [[], ["started"], ["started", "completed"]]
    journal.close()


def test_a_segment_is_sealed_at_its_bound_and_a_new_one_begins(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path, "run1", max_events=2)
    for number in range(1, 6):
        journal.append(_event(number))
    assert [path.name for path in journal.sealed] == ["run1.1.jsonl", "run1.2.jsonl"]
    assert journal.live.name == "run1.3.jsonl"
    assert [len(_lines(path)) for path in (*journal.sealed, journal.live)] == [2, 2, 1]
    journal.close()


def test_a_segment_is_sealed_by_size_too(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path, "run1", max_bytes=1)
    journal.append(_event(1))
    assert [path.name for path in journal.sealed] == ["run1.1.jsonl"]
    journal.close()


class Broker:
    """Confirms its store when released; fails to when told."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()
        self.fail = False

    async def stored(self) -> None:
        self.asked.set()
        if self.fail:
            raise errors.CallTimeout("proxy:jobs-stored: no answer within 1 s")
        await self.release.wait()


async def test_sealed_segments_go_once_the_broker_confirms_and_not_before(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path, "run1")
    journal.append(_event(1))
    broker = Broker()
    trimming = asyncio.ensure_future(journal.trim(broker.stored))
    await asyncio.wait_for(broker.asked.wait(), 5)
    first = tmp_path / "run1.1.jsonl"
    assert first.exists()  # sealed, waiting for the broker
    journal.append(_event(2))  # sent after the question: not covered by its answer
    broker.release.set()
    assert await asyncio.wait_for(trimming, 5)
    assert not first.exists()
    assert _lines(journal.live) == [_event(2)]
    journal.close()


async def test_the_trimmer_rests_while_nothing_is_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing to trim it waits for the next event, not for its timer: an idle worker
    is not woken every second."""
    journal = JobJournal(tmp_path, "run1")
    trims: list[int] = []
    trim = journal.trim

    async def counted(stored: Any, flush: Any = lambda: None) -> bool:
        trims.append(len(journal.sealed))
        return await trim(stored, flush)

    monkeypatch.setattr(journal, "trim", counted)
    broker = Broker()
    broker.release.set()
    trimming = asyncio.ensure_future(
        journal.keep_trimmed(broker.stored, lambda: None, interval=0.01)
    )
    try:
        await asyncio.sleep(0.2)
        assert len(trims) == 1  # one look found nothing: resting since, twenty intervals
        journal.append(_event(1))
        for _ in range(500):
            if not (tmp_path / "run1.1.jsonl").exists():
                break
            await asyncio.sleep(0.01)
        assert not (tmp_path / "run1.1.jsonl").exists()  # woken, sealed, confirmed, deleted
        assert len(trims) == 2
    finally:
        trimming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await trimming


async def test_an_end_still_batched_is_told_the_broker_before_its_segment_is_confirmed(
    tmp_path: Path,
) -> None:
    """A job's end goes to the broker batched, after the answer; the segment holding it may be
    sealed first. The confirmation must cover it, or a worker killed next loses it."""
    told: list[str] = []
    journal = JobJournal(tmp_path, "run1")
    log = JobLog(lambda events: told.extend(e.kind for e in events), flush_s=60.0)
    log.journal = journal
    job = log.new(origin=NodeId("me"), engine=EngineName("ollama"), model="m", path="/api/chat")
    job.submitted(1, NodeId("me"))
    job.completed()  # journaled; rides the batch that waits (60 s)
    told_when_asked: list[str] = []

    async def stored() -> None:
        told_when_asked.extend(told)

    assert await journal.trim(stored, log.flush)
    assert told_when_asked == ["submitted", "completed"]
    assert not (tmp_path / "run1.1.jsonl").exists()
    journal.close()


async def test_a_segment_the_broker_did_not_confirm_stays_for_the_next_try(
    tmp_path: Path,
) -> None:
    journal = JobJournal(tmp_path, "run1")
    journal.append(_event(1))
    broker = Broker()
    broker.fail = True
    assert not await journal.trim(broker.stored)
    assert [path.name for path in journal.sealed] == ["run1.1.jsonl"]
    assert journal.sealed[0].exists()
    broker.fail = False
    broker.release.set()
    assert await journal.trim(broker.stored)
    assert journal.sealed == [] and not (tmp_path / "run1.1.jsonl").exists()
    journal.close()


async def test_nothing_to_confirm_asks_the_broker_nothing(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path, "run1")
    broker = Broker()
    assert await journal.trim(broker.stored)
    assert not broker.asked.is_set()
    journal.close()


def test_a_write_that_fails_does_not_fail_the_answer(tmp_path: Path) -> None:
    journal = JobJournal(tmp_path / "gone", "run1")
    journal.close()
    (tmp_path / "gone" / "run1.1.jsonl").unlink(missing_ok=True)
    (tmp_path / "gone").rmdir()
    journal.append(_event(1))  # no folder to open the segment in: logged, not raised
    assert not (tmp_path / "gone").exists()


def test_a_worker_whose_journal_folder_cannot_be_made_serves_without_one(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"")
    service = ProxyService({}, clock=FakeClock(), rng=random.Random(0), journal_dir=blocked)
    assert service._job_log().journal is None
    service = ProxyService({}, clock=FakeClock(), rng=random.Random(0), journal_dir=tmp_path)
    journal = service._job_log().journal
    assert journal is not None
    journal.close()
