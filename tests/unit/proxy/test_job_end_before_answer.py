"""A complete answer's job ends before the client can see the answer whole.

Research rule G4: every client that saw its answer complete has a terminal row. The proxy
worker can be killed at any instant; if the job's end were recorded after the answer's last
byte, a kill in between would leave a job the broker fails although its client has the answer.
So the relay ends the job before the chunk holding a stream's final marker, before the last
bytes of a counted body, and before the end of any other body; and an answer cut short is
still a failed job. Here the job log has no journal, so the end goes to the broker at once:
the order is seen in what the broker is told. With a journal (as the worker runs) the end is
journaled there instead and told the broker after the byte: ``test_job_end_after_answer.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import FLUSH_S, JobLog
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import Door, Timeline, scripted_door, spy_relay


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> Timeline:
    """What the door writes to its clients and hands to the broker, in the order it happens."""
    seen: Timeline = []
    spy_relay(monkeypatch, seen)
    return seen


@contextlib.asynccontextmanager
async def _door(engine: ScriptedEngine, timeline: Timeline) -> AsyncIterator[Door]:
    def to_broker(events: list[JobEvent]) -> None:
        timeline.append(("broker", [event.kind for event in events]))

    # Batching as the worker does: only a job's end is sent at once.
    async with scripted_door(engine, JobLog(to_broker, flush_s=FLUSH_S), slots=4) as client:
        yield client


@pytest.fixture
async def door(timeline: Timeline) -> AsyncIterator[Door]:
    async with _door(ScriptedEngine("e", tokens=3), timeline) as client:
        yield client


@pytest.fixture
async def cutting_door(timeline: Timeline) -> AsyncIterator[Door]:
    async with _door(ScriptedEngine("e", behaviour="cut", tokens=3), timeline) as client:
        yield client


def _end(timeline: Timeline) -> int:
    """Where the job's end went to the broker."""
    ends = [
        i
        for i, (what, kinds) in enumerate(timeline)
        if what == "broker"
        and kinds[-1:]
        in (
            ["completed"],
            ["errored"],
        )
    ]
    assert len(ends) == 1, timeline
    return ends[0]


async def test_a_stream_s_job_ends_before_the_chunk_with_its_final_marker(
    door: TestClient[web.Request, web.Application], timeline: Timeline
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = await door.post("/api/chat", json=body)
    assert response.status == 200
    assert b'"done": true' in await response.read()
    end = _end(timeline)
    assert timeline[end][1][-1] == "completed"
    final = next(
        i for i, (what, data) in enumerate(timeline) if what == "client" and b'"done": true' in data
    )
    assert end < final, f"the job ended after its client had the final marker: {timeline}"
    earlier = [data for what, data in timeline[:end] if what == "client"]
    assert earlier and all(b'"done": false' in data for data in earlier)


async def test_a_counted_answer_s_job_ends_before_its_last_bytes(
    door: TestClient[web.Request, web.Application], timeline: Timeline
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    response = await door.post("/api/chat", json=body)
    assert response.status == 200
    assert response.content_length is not None
    assert (await response.json())["done"] is True
    end = _end(timeline)
    assert timeline[end][1][-1] == "completed"
    writes = [i for i, (what, _) in enumerate(timeline) if what.startswith("client")]
    assert writes and end < writes[0], f"the body went out before its job ended: {timeline}"


async def test_a_stream_cut_short_is_still_a_failed_job(
    cutting_door: TestClient[web.Request, web.Application], timeline: Timeline
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = await cutting_door.post("/api/chat", json=body)
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()
    end = _end(timeline)
    assert timeline[end][1][-1] == "errored"
    assert not any(b'"done": true' in data for what, data in timeline if what == "client")


class _CountedStreamCut(ScriptedEngine):
    """Streams with a Content-Length: one record, and no final one."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        body = b'{"model": "m", "done": false}\n'
        return web.Response(body=body, content_type="application/x-ndjson")


async def test_a_counted_stream_without_its_final_marker_is_a_failed_job(
    timeline: Timeline,
) -> None:
    async with _door(_CountedStreamCut("e"), timeline) as door:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = await door.post("/api/chat", json=body)
        assert response.status == 200 and response.content_length is not None
        await response.read()
    assert timeline[_end(timeline)][1][-1] == "errored", "its length is not its end"
