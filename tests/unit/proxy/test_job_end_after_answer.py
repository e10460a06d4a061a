"""With a journal, as the worker runs, a job's end is journaled before the answer's last byte
and told the broker after it, batched.

The journal keeps research G4 (a client that saw its answer complete has a terminal row) for a
kill of either process: a broker applies the journal when it starts, and when its worker exits
(``test_jobs_exit_journal.py``). So nothing on the client's path waits for, or wakes, the
broker: the notification goes with the batch already waiting, or on the loop's next turn when
none waits, and ends that come together go in one notification.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import FLUSH_S, Job, JobLog
from backend.workers.proxy.channels.journal import JobJournal
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import Door, Timeline, scripted_door, spy_relay

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class _Journal(JobJournal):
    """Notes each end in the timeline as it is written."""

    def __init__(self, folder: Path, timeline: Timeline) -> None:
        super().__init__(folder, "run1")
        self._timeline = timeline

    def append(self, event: JobEvent) -> None:
        super().append(event)
        self._timeline.append(("journal", event.kind))


class _Broker:
    def __init__(self, timeline: Timeline | None = None) -> None:
        self.timeline = timeline if timeline is not None else []
        self.batches: list[list[str]] = []

    def notify(self, events: list[JobEvent]) -> None:
        kinds: list[str] = [event.kind for event in events]
        self.batches.append(kinds)
        self.timeline.append(("broker", kinds))


@contextlib.asynccontextmanager
async def _door(tmp_path: Path, timeline: Timeline) -> AsyncIterator[Door]:
    log = JobLog(_Broker(timeline).notify, flush_s=FLUSH_S, journal=_Journal(tmp_path, timeline))
    async with scripted_door(ScriptedEngine("e", tokens=3), log, slots=4) as client:
        yield client


def _where(timeline: Timeline, what: str, found: Callable[[Any], bool]) -> int:
    """Where the first ``what`` entry whose data is ``found`` is."""
    return next(i for i, (kind, data) in enumerate(timeline) if kind == what and found(data))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "counted"])
async def test_the_end_is_journaled_before_the_last_byte_and_told_the_broker_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    timeline: Timeline = []
    spy_relay(monkeypatch, timeline)
    async with _door(tmp_path, timeline) as door:
        response = await door.post("/api/chat", json={**CHAT, "stream": stream})
        assert response.status == 200
        assert b'"done": true' in await response.read()
        await asyncio.sleep(FLUSH_S * 3)  # the batch the end went with is due by now
    journaled = _where(timeline, "journal", lambda kind: kind == "completed")
    told = _where(timeline, "broker", lambda kinds: "completed" in kinds)
    last_byte = max(i for i, (kind, _) in enumerate(timeline) if kind.startswith("client"))
    if stream:  # the byte that completes a stream is the chunk with its final marker
        last_byte = _where(timeline, "client", lambda data: b'"done": true' in data)
    assert journaled < last_byte < told, timeline
    sent = [kind for what, kinds in timeline if what == "broker" for kind in kinds]
    assert sent == ["submitted", "started", "completed"], "every event once, in order"


def _job(log: JobLog) -> Job:
    return log.new(origin=NodeId("me"), engine=EngineName("ollama"), model="m", path="/api/chat")


async def test_an_end_rides_the_batch_already_waiting(tmp_path: Path) -> None:
    broker = _Broker()
    log = JobLog(broker.notify, flush_s=0.2, journal=JobJournal(tmp_path, "run1"))
    job = _job(log)
    job.submitted(1, NodeId("me"))  # sets the batch's timer
    job.completed()
    await asyncio.sleep(0.02)
    assert broker.batches == [], "the end left before the batch it joined was due"
    assert log.journal is not None
    lines = log.journal.live.read_bytes().splitlines()
    assert [msgspec.json.decode(line, type=JobEvent).kind for line in lines] == ["completed"]
    await asyncio.sleep(0.3)
    assert broker.batches == [["submitted", "completed"]]


async def test_ends_with_nothing_waiting_go_on_the_next_turn_together(tmp_path: Path) -> None:
    broker = _Broker()
    log = JobLog(broker.notify, flush_s=10.0, journal=JobJournal(tmp_path, "run1"))
    first, second = _job(log), _job(log)
    first.failed("boom")  # no batch waits: no timer was set
    second.completed()
    assert broker.batches == [], "an end was told the broker before its answer could go"
    await asyncio.sleep(0)
    assert broker.batches == [["errored", "completed"]], "ends of one turn go together"
    third = _job(log)
    third.completed()
    await asyncio.sleep(0)
    assert broker.batches[1:] == [["completed"]], "each turn's ends go on the next"


def test_without_a_loop_an_end_goes_at_once(tmp_path: Path) -> None:
    broker = _Broker()
    log = JobLog(broker.notify, flush_s=FLUSH_S, journal=JobJournal(tmp_path, "run1"))
    _job(log).completed()
    assert broker.batches == [["completed"]]


async def test_without_a_journal_an_end_goes_at_once_with_what_waited() -> None:
    broker = _Broker()
    log = JobLog(broker.notify, flush_s=10.0)
    job = _job(log)
    job.submitted(1, NodeId("me"))
    job.completed()
    assert broker.batches == [["submitted", "completed"]]
