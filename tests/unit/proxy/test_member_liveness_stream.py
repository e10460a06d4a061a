"""What a request on a member sees when the member leaves the routing table (its member link
went down), in-process: a door over a router, a member's relay faked on loopback.

Before the first byte with no other owner: the door's 503 naming the member, after a bounded
wait for it. While its answer streams: the stream is cut with the API's error record, never a
clean ``done``. A member's silent stream waits past the relay's idle limit while the member is
still linked, and is cut at the first-content bound; this computer's engines never get the
relay's limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget, TargetKind
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.candidates import RELAY_PREFIX
from backend.workers.proxy.routing.dispatch import Router
from backend.workers.proxy.upstream.attempt import SentRequest
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

RECORD = b'{"model": "m", "message": {"content": "hi"}, "done": false}\n'
DONE = b'{"model": "m", "done": true}\n'
MEMBER = "node-b"
MEMBER_NAME = "member-b"


@dataclass
class Member:
    """A member's relay for ``/api/chat``: a first record at once, then what ``pause_s`` says
    (None: silence until the client goes), then ``done``; or no headers at all (``hang``)."""

    hang: bool = False
    pause_s: float | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.arrived.set()
        if self.hang:
            await asyncio.Event().wait()
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(RECORD)
        if self.pause_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.pause_s)
        await response.write(DONE)
        await response.write_eof()
        return response


@dataclass
class Door:
    router: Router
    client: TestClient[web.Request, web.Application]
    members: list[Member] = field(default_factory=list)

    async def member(self, **behaviour: Any) -> Member:
        member = Member(**behaviour)
        app = web.Application()
        app.router.add_post(f"{RELAY_PREFIX}/ollama/api/chat", member.chat)
        app.router.add_post("/api/chat", member.chat)
        member.server = TestServer(app)
        await member.server.start_server()
        self.members.append(member)
        return member

    def table(self, *targets: RouteTarget, **options: Any) -> None:
        self.router.update(
            ProxyTargets(node_id="self", engines={"ollama": list(targets)}, **options)
        )

    async def chat(self) -> tuple[int, dict[str, str], list[dict[str, Any]]]:
        async with asyncio.timeout(20):
            response = await self.client.post("/api/chat", json={"model": "m", "messages": []})
            body = b""
            try:
                body = await response.read()
            except aiohttp.ClientPayloadError as exc:  # cut before its end, as it must be
                body = getattr(exc, "partial", b"") or body
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            return response.status, dict(response.headers), lines

    async def chat_streaming(self) -> list[dict[str, Any]]:
        """The records the client read before its stream ended (cleanly or not)."""
        async with asyncio.timeout(20):
            response = await self.client.post("/api/chat", json={"model": "m", "messages": []})
            records: list[dict[str, Any]] = []
            try:
                async for line in response.content:
                    if line.strip():
                        records.append(json.loads(line))
            except aiohttp.ClientPayloadError:
                pass
            return records


def peer(url: str, kind: TargetKind = "peer") -> RouteTarget:
    return RouteTarget(node_id=MEMBER, kind=kind, base_url=url, name=MEMBER_NAME, models=["m"])


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    session = aiohttp.ClientSession(request_class=SentRequest)
    router = make_router(session, clock=FakeClock())  # backoff sleeps jump: no real waiting
    client = TestClient(TestServer(build_app(DoorContext("ollama", router, RelayBoard()))))
    await client.start_server()
    built = Door(router, client)
    try:
        yield built
    finally:
        await client.close()
        await session.close()
        for member in built.members:
            assert member.server is not None
            await member.server.close()


async def test_a_request_waiting_on_a_member_that_left_is_answered_503_naming_it(
    door: Door,
) -> None:
    member = await door.member(hang=True)
    door.table(peer(member.url))
    asking = asyncio.create_task(door.chat())
    await asyncio.wait_for(member.arrived.wait(), 10)
    away = AwayModels(node_id=MEMBER, name=MEMBER_NAME, engine="ollama", models=["m"])
    door.table(away=[away])  # its link went down: out of the table, remembered as away
    status, headers, lines = await asking
    assert status == 503
    assert int(headers["Retry-After"]) > 0
    assert MEMBER_NAME in lines[0]["error"]


async def test_a_stream_flowing_from_a_member_that_left_ends_with_an_error_record(
    door: Door,
) -> None:
    member = await door.member(pause_s=None)
    door.table(peer(member.url))
    reading = asyncio.create_task(door.chat_streaming())
    await asyncio.wait_for(member.arrived.wait(), 10)
    await asyncio.sleep(0.2)  # the first record is on its way
    door.table()  # the member left
    records = await reading
    assert records[0] == json.loads(RECORD)
    assert not any(record.get("done") for record in records), "a dead stream ended clean"
    assert MEMBER_NAME in records[-1]["error"]


async def test_a_silent_member_that_is_still_linked_is_waited_for_past_the_relay_idle_limit(
    door: Door,
) -> None:
    member = await door.member(pause_s=0.8)
    door.table(peer(member.url), relay_idle_s=0.2, first_content_timeout_s=30.0)
    records = await door.chat_streaming()
    assert records == [json.loads(RECORD), json.loads(DONE)]


async def test_a_linked_members_stream_silent_for_the_first_content_bound_is_cut(
    door: Door,
) -> None:
    member = await door.member(pause_s=None)
    door.table(peer(member.url), relay_idle_s=0.2, first_content_timeout_s=0.6)
    records = await door.chat_streaming()
    assert not any(record.get("done") for record in records)
    assert "sent nothing for 0.6 s" in records[-1]["error"]


async def test_an_engine_of_this_computer_does_not_get_the_relay_idle_limit(door: Door) -> None:
    engine = await door.member(pause_s=0.8)
    door.table(peer(engine.url, kind="engine"), relay_idle_s=0.2, first_content_timeout_s=30.0)
    records = await door.chat_streaming()
    assert records == [json.loads(RECORD), json.loads(DONE)]
