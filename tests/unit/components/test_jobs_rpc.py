"""``jobs:*`` through the real dispatcher and a real connection: snapshots newest first,
limits checked, pushes only to subscribers and numbered after their snapshot."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from backend.components.jobs import rpc
from backend.components.jobs.component import JobsComponent
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.core.store import Store
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.jobs import JobDetails, JobsEvent, JobsSnapshot
from tests.fakes import FakeClock
from tests.unit.components.jobs_rig import running


@dataclass
class Connected:
    client: RpcPeer
    server: RpcPeer
    hub: ClientHub
    jobs: JobsComponent
    pushes: asyncio.Queue[JobsEvent]

    def report(self, n: int, seq: int = 1) -> None:
        self.jobs.on_job_event(
            {
                "key": f"me/run1/{n}",
                "seq": seq,
                "kind": "submitted" if seq == 1 else "completed",
                "attempt": 1,
                "at": 200.0 + n,
                "engine": "ollama",
                "model": "llama3",
                "origin": "me",
                "run_id": "run1",
                "created_at": 100.0 + n,
                "target": "me",
            }
        )

    async def snapshot(self, method: str, params: Any = None) -> JobsSnapshot:
        return msgspec.convert(await self.client.call(method, params), JobsSnapshot)


@pytest.fixture
async def connected(tmp_path: Path) -> AsyncIterator[Connected]:
    store = Store(tmp_path / "pair.db")
    await store.open()
    hub = ClientHub()
    events = NumberedStream(methods.JOBS_EVENT, hub)
    jobs = JobsComponent(
        store=JobRecordStore(store), clock=FakeClock(), node_id="me", events=events
    )
    dispatcher = Dispatcher()
    rpc.register(dispatcher, jobs, events)
    pushes: asyncio.Queue[JobsEvent] = asyncio.Queue()

    def on_push(method: str, params: Any, _: RpcPeer) -> None:
        assert method == methods.JOBS_EVENT.name
        pushes.put_nowait(msgspec.convert(params, JobsEvent))

    left, right = socket.socketpair()
    server_reader, server_writer = await asyncio.open_connection(sock=left)
    client_reader, client_writer = await asyncio.open_connection(sock=right)
    server = RpcPeer(server_reader, server_writer, name="broker", on_request=dispatcher)
    client = RpcPeer(client_reader, client_writer, name="gui", on_notification=on_push)
    hub.add(server)
    tasks = [asyncio.create_task(server.run()), asyncio.create_task(client.run())]
    try:
        yield Connected(client, server, hub, jobs, pushes)
    finally:
        client.close()
        server.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        await store.close()


async def test_get_initial_is_newest_first_and_limited(connected: Connected) -> None:
    for n in (1, 3, 2):
        connected.report(n)
    snapshot = await connected.snapshot(methods.JOBS_GET_INITIAL)
    assert [w.key for w in snapshot.jobs] == ["me/run1/3", "me/run1/2", "me/run1/1"]
    assert snapshot.seq == 3
    limited = await connected.snapshot(methods.JOBS_GET_INITIAL, {"limit": 1})
    assert [w.key for w in limited.jobs] == ["me/run1/3"]


@pytest.mark.parametrize("limit", [0, 1001, -5])
async def test_a_limit_outside_1_to_1000_is_invalid(connected: Connected, limit: int) -> None:
    for method in (methods.JOBS_GET_INITIAL, methods.JOBS_SUBSCRIBE):
        with pytest.raises(errors.InvalidParams, match=f"limit must be 1-1000, got {limit}"):
            await connected.client.call(method, {"limit": limit})


async def test_a_limit_of_the_wrong_type_is_invalid(connected: Connected) -> None:
    with pytest.raises(errors.InvalidParams, match="limit"):
        await connected.client.call(methods.JOBS_GET_INITIAL, {"limit": "all"})


async def test_get_initial_alone_does_not_subscribe(connected: Connected) -> None:
    await connected.snapshot(methods.JOBS_GET_INITIAL)
    connected.report(1)
    await connected.snapshot(methods.JOBS_GET_INITIAL)  # a round trip after the report
    assert connected.pushes.empty()


async def test_subscribers_get_events_numbered_after_their_snapshot(connected: Connected) -> None:
    connected.report(1)
    snapshot = await connected.snapshot(methods.JOBS_SUBSCRIBE, {"limit": 10})
    assert ([w.key for w in snapshot.jobs], snapshot.seq) == (["me/run1/1"], 1)
    connected.report(1, seq=2)
    connected.report(2)
    first = await asyncio.wait_for(connected.pushes.get(), 5)
    second = await asyncio.wait_for(connected.pushes.get(), 5)
    assert (first.seq, _tag(first), first.key) == (2, "upsert", "me/run1/1")
    assert first.job is not None and first.job.state == "completed"
    assert (second.seq, second.key) == (3, "me/run1/2")


async def test_unsubscribe_and_leaving_stop_the_pushes(connected: Connected) -> None:
    await connected.snapshot(methods.JOBS_SUBSCRIBE)
    assert await connected.client.call(methods.JOBS_UNSUBSCRIBE) == {"subscribed": False}
    connected.report(1)
    await connected.snapshot(methods.JOBS_SUBSCRIBE)
    connected.hub.remove(connected.server)
    connected.report(2)
    await connected.snapshot(methods.JOBS_GET_INITIAL)  # a round trip after the reports
    assert connected.pushes.empty()


async def test_clear_deletes_finished_jobs_and_pushes_their_removal(connected: Connected) -> None:
    for n in (1, 2, 3):
        connected.report(n)
    connected.report(1, seq=2)
    connected.report(3, seq=2)
    async with running(connected.jobs):
        snapshot = await connected.snapshot(methods.JOBS_SUBSCRIBE)
        assert await connected.client.call(methods.JOBS_CLEAR) == {"cleared": 2}
        first = await asyncio.wait_for(connected.pushes.get(), 5)
        second = await asyncio.wait_for(connected.pushes.get(), 5)
        assert [(p.seq, _tag(p), p.key) for p in (first, second)] == [
            (snapshot.seq + 1, "remove", "me/run1/1"),
            (snapshot.seq + 2, "remove", "me/run1/3"),
        ]
        after = await connected.snapshot(methods.JOBS_GET_INITIAL)
        assert [w.key for w in after.jobs] == ["me/run1/2"]


async def test_clear_while_the_history_is_loading_is_unavailable(connected: Connected) -> None:
    with pytest.raises(errors.Unavailable, match="still loading"):
        await connected.client.call(methods.JOBS_CLEAR)


def _tag(event: object) -> str:
    """A tagged event's wire tag (its ``event`` member)."""
    return str(type(event).__struct_config__.tag)  # type: ignore[attr-defined]


async def test_get_answers_one_job_with_its_timeline(connected: Connected) -> None:
    connected.report(1)
    connected.report(1, seq=2)
    answer = await connected.client.call(methods.JOBS_GET.name, {"key": "me/run1/1"})
    details = msgspec.convert(answer, JobDetails)
    assert details.job.state == "completed"
    assert [step.kind for step in details.timeline] == ["submitted", "completed"]
    with pytest.raises(errors.NotFound):
        await connected.client.call(methods.JOBS_GET.name, {"key": "me/run1/9"})
