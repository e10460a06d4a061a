"""A job's end is durable before the last byte of its answer goes out, at no wait.

A broker killed just after a client had its whole answer must still find that job completed
when it starts again. So the job's end is in the worker's journal (one ``os.write``: in the
page cache, which a ``kill -9`` does not undo) before the bytes that complete the answer (a
stream's final marker, a counted body's last bytes, a translated whole answer) go out, and
the answer never waits for the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import FLUSH_S, JobLog
from backend.workers.proxy.channels.journal import JobJournal
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.serving import RelayBoard
from tests.integration.proxy.scripted import ScriptedEngine
from tests.unit.proxy.scripted_door import Door, make_router, scripted_door

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ENDS = ("completed", "errored")


class WatchedJournal(JobJournal):
    """Notes, at each write, whether the client already had its whole answer."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, "run1")
        self.reading: asyncio.Future[bytes] | None = None
        self.answered_before_write: list[bool] = []

    def append(self, event: JobEvent) -> None:
        super().append(event)
        if event.kind in ENDS:
            self.answered_before_write.append(self.reading is not None and self.reading.done())

    def kinds(self) -> list[str]:
        """The kinds of the job ends in the live segment, as a broker would read them (a
        job's start is journaled too)."""
        lines = self.live.read_bytes().splitlines()
        kinds = [msgspec.json.decode(line, type=JobEvent).kind for line in lines]
        return [kind for kind in kinds if kind in ENDS]


class Broker:
    """Takes job events; never confirms a store (the answer must not need it)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def notify(self, events: list[JobEvent]) -> None:
        self.kinds += [event.kind for event in events]


@contextlib.asynccontextmanager
async def _door(journal: JobJournal, engine: ScriptedEngine) -> AsyncIterator[Door]:
    log = JobLog(Broker().notify, flush_s=FLUSH_S, journal=journal)
    async with scripted_door(engine, log, slots=4) as client:
        yield client


async def _read(journal: WatchedJournal, read: Callable[[], Awaitable[bytes]]) -> bytes:
    """The whole answer; the journal must hold the job's end once the client has it."""
    journal.reading = asyncio.ensure_future(read())
    body = await asyncio.wait_for(journal.reading, 5)
    assert journal.kinds() == ["completed"]  # on disk when the client had its answer
    assert journal.answered_before_write == [False]
    return body


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "counted"])
async def test_the_job_s_end_is_journaled_before_the_answer_is_whole(
    tmp_path: Path, stream: bool
) -> None:
    journal = WatchedJournal(tmp_path / "journal")
    async with _door(journal, ScriptedEngine("e", tokens=3)) as door:

        async def answer() -> bytes:  # a counted answer's headers go with its body
            response = await door.post("/api/chat", json={**CHAT, "stream": stream})
            assert response.status == 200
            return await response.read()

        body = await _read(journal, answer)
    assert b'"done": true' in body


async def test_a_failed_answer_s_end_is_journaled_too(tmp_path: Path) -> None:
    journal = WatchedJournal(tmp_path / "journal")
    async with _door(journal, ScriptedEngine("e", behaviour="cut", tokens=3)) as door:
        response = await door.post("/api/chat", json={**CHAT, "stream": True})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(response.read(), 5)
    assert journal.kinds() == ["errored"]


async def test_a_load_request_the_door_answers_is_journaled_before_its_answer(
    tmp_path: Path,
) -> None:
    journal = WatchedJournal(tmp_path / "journal")
    log = JobLog(Broker().notify, flush_s=FLUSH_S, journal=journal)
    async with aiohttp.ClientSession() as session:
        router = make_router(session, log)
        # An engine PAIR translates Ollama's API for: Ollama's load request is answered here.
        target = RouteTarget(
            node_id="self",
            kind="local",
            base_url="http://127.0.0.1:9",
            models=["m"],
            engine="llamacpp",
        )
        router.update(ProxyTargets(node_id="self", engines={"llamacpp": [target]}))
        app = build_app(DoorContext("ollama", router, RelayBoard()))
        async with TestClient(TestServer(app)) as door:

            async def answer() -> bytes:
                response = await door.post("/api/chat", json={"model": "m", "messages": []})
                assert response.status == 200
                return await response.read()

            body = await _read(journal, answer)
        await router.close()
    assert b'"done"' in body
