"""A served request leaves nothing for the cycle collector.

Every object a request makes (its job, dispatch, ticket, admission, aiohttp's request) must be
freed by reference counting the moment the request ends. One reference cycle through them (a
scheduler ticket keeping its ``on_wait`` callback, which referred to the dispatch holding the
ticket) once put every request's whole object graph in the collector's hands: a seventh of the
proxy worker's CPU per request, and collector passes that stalled every stream in flight.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from backend.workers.proxy.channels import jobs
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.routing import admission
from backend.workers.proxy.scheduler import engine_scheduler as scheduler
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import Door, scripted_door

# What one request makes at the door (and its aiohttp request); none may outlive it.
REQUEST_TYPES = (jobs.Job, admission.Dispatch, admission.Admission, scheduler.Ticket)


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    # One slot: of requests sent together, all but one wait for the scheduler's turn.
    engine = ScriptedEngine("e", tokens=3, token_delay=0.005)
    async with scripted_door(engine, JobLog(lambda event: None), slots=1) as client:
        yield client


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """What the collector finds unreachable from here on, kept for the test to look at."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _chat(client: TestClient[web.Request, web.Application], stream: bool) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response = await client.post("/api/chat", json=body)
    assert response.status == 200
    return await response.read()


async def test_requests_served_and_queued_leave_no_cyclic_garbage(
    door: TestClient[web.Request, web.Application], saved_garbage: list[object]
) -> None:
    await _chat(door, stream=True)  # the first request's one-off setup (pools) is not counted
    gc.collect()
    saved_garbage.clear()

    # Streams and JSON answers, eight at once on one slot: seven wait their turn first.
    answers = await asyncio.gather(*(_chat(door, stream=i % 2 == 0) for i in range(8)))
    assert all(b'"done":true' in answer.replace(b" ", b"") for answer in answers)
    # Freed by reference counting as each ended: none is alive, none is left to collect.
    # (aiohttp keeps a connection's last request until its next one: not counted as alive.)
    alive = _names(gc.get_objects(), None)
    gc.collect()
    cyclic = _names(saved_garbage, door.app)
    assert alive == [], f"objects of finished requests are still alive: {alive}"
    assert cyclic == [], f"requests left reference cycles behind: {cyclic}"


def _names(objects: list[object], app: web.Application | None) -> list[str]:
    """The kinds of the door's request objects among ``objects`` (aiohttp's requests of
    ``app`` too, not the engine's)."""
    return sorted({type(found).__qualname__ for found in objects if _of_door(found, app)})


def _of_door(found: object, app: web.Application | None) -> bool:
    if isinstance(found, web.Request):
        return app is not None and found.app is app
    return isinstance(found, REQUEST_TYPES)
