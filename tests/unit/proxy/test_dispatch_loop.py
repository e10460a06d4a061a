"""The dispatch loop in-process: a door app, fake engines on loopback, a fake clock and jitter.

Time moves only when the loop backs off (``FakeClock``) or an engine says so, and the jitter is
scripted, so the backoff delays and the dispatch budget are checked exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget, TargetKind
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.candidates import owners
from backend.workers.proxy.routing.departures import Departures, Gone, unless_gone
from backend.workers.proxy.routing.dispatch import Router
from backend.workers.proxy.routing.failover import RetryPolicy
from backend.workers.proxy.upstream.attempt import Commit, Failure, SentRequest
from tests.fakes import FakeClock
from tests.support.ports import refusing_port
from tests.unit.proxy.scripted_door import make_router

Behaviour = Literal["ok", "error", "busy", "hang"]
LOCAL = "self"
DONE_LINE = b'{"model": "m", "done": true}\n'


class ScriptedJitter:
    """A random source that hands out the given values in order and records each range asked."""

    def __init__(self, *values: float) -> None:
        self._values = list(values)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float, /) -> float:
        self.ranges.append((a, b))
        return self._values.pop(0)


@dataclass
class FakeEngine:
    """An Ollama-shaped ``/api/chat`` that always answers the same way; ``advance_s`` of fake
    time pass while it works on each request."""

    behaviour: Behaviour
    clock: FakeClock
    advance_s: float = 0.0
    received: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.received += 1
        self.arrived.set()
        self.clock.now += self.advance_s
        if self.behaviour == "error":
            return web.json_response({"error": "engine exploded"}, status=500)
        if self.behaviour == "busy":
            return web.json_response({"error": "server busy"}, status=503)
        if self.behaviour == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()  # the proxy closed the connection
                raise
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"model": "m", "message": {"content": "hi"}, "done": false}\n')
        await response.write(DONE_LINE)
        await response.write_eof()
        return response


@dataclass
class Harness:
    """One ollama door over a router with the fake clock; its engines and the job events."""

    clock: FakeClock
    router: Router
    client: TestClient[web.Request, web.Application]
    events: list[JobEvent]
    engines: list[FakeEngine] = field(default_factory=list)

    async def engine(self, behaviour: Behaviour, *, advance_s: float = 0.0) -> FakeEngine:
        engine = FakeEngine(behaviour, self.clock, advance_s)
        app = web.Application()
        app.router.add_post("/api/chat", engine.chat)
        engine.server = TestServer(app)
        await engine.server.start_server()
        self.engines.append(engine)
        return engine

    def table(self, *targets: RouteTarget, **options: Any) -> None:
        self.router.update(
            ProxyTargets(node_id=LOCAL, engines={"ollama": list(targets)}, **options)
        )

    async def chat(self) -> tuple[int, bytes]:
        async with asyncio.timeout(10):
            response = await self.client.post("/api/chat", json={"model": "m", "messages": []})
            return response.status, await response.read()

    def trail(self) -> list[tuple[str, int, str | None]]:
        """Each job event as (kind, attempt, target or serving node)."""
        return [(e.kind, e.attempt, e.target or e.node) for e in self.events]


def target(node_id: str, url: str, kind: TargetKind = "engine") -> RouteTarget:
    return RouteTarget(node_id=node_id, kind=kind, base_url=url, models=["m"])


async def _harness(jitter: ScriptedJitter, policy: RetryPolicy) -> Harness:
    clock = FakeClock()
    events: list[JobEvent] = []
    session = aiohttp.ClientSession(request_class=SentRequest)
    router = make_router(
        session, JobLog(events.extend, run_id="r"), clock=clock, rng=jitter, policy=policy
    )
    client = TestClient(TestServer(build_app(DoorContext("ollama", router, RelayBoard()))))
    client.app.on_cleanup.append(lambda _: session.close())
    await client.start_server()
    return Harness(clock, router, client, events)


@pytest.fixture
def jitter() -> ScriptedJitter:
    return ScriptedJitter(0.25, -0.25, 0.125, -0.125)


@pytest.fixture
def policy() -> RetryPolicy:
    return RetryPolicy()


@pytest.fixture
async def harness(jitter: ScriptedJitter, policy: RetryPolicy) -> AsyncIterator[Harness]:
    built = await _harness(jitter, policy)
    yield built
    await built.client.close()
    for engine in built.engines:
        assert engine.server is not None
        await engine.server.close()


@pytest.mark.parametrize("first", ["error", "busy", None])
async def test_a_failure_before_the_commit_goes_to_the_next_candidate_at_once(
    harness: Harness, first: Behaviour | None
) -> None:
    healthy = await harness.engine("ok")
    with refusing_port() as dead:
        first_url = f"http://127.0.0.1:{dead}"
        if first is not None:
            first_url = (await harness.engine(first)).url
        harness.table(target("node-b", healthy.url), target("node-a", first_url))  # by node id

        status, body = await harness.chat()

    assert status == 200 and body.endswith(DONE_LINE)
    assert harness.trail() == [
        ("submitted", 1, "node-a"),
        ("submitted", 2, "node-b"),
        ("started", 2, "node-b"),
        ("completed", 2, None),
    ]
    assert harness.clock.sleeps == [], "no backoff within a round"


async def test_rounds_back_off_by_the_schedule_with_the_injected_jitter(
    harness: Harness, jitter: ScriptedJitter
) -> None:
    broken = await harness.engine("error")
    harness.table(target(LOCAL, broken.url, "local"))

    status, body = await harness.chat()

    # 1, 2, 4, 8 s, each times (1 + jitter): the jitter is drawn from ±25 %.
    assert harness.clock.sleeps == [1.25, 1.5, 4.5, 7.0]
    assert jitter.ranges == [(-0.25, 0.25)] * 4
    assert broken.received == 5, "at most 5 dispatches"
    assert (status, json.loads(body)) == (500, {"error": "engine exploded"})
    attempts = [(e.attempt, e.target) for e in harness.events if e.kind == "submitted"]
    assert attempts == [
        (1, LOCAL),
        (2, None),  # waiting for the next round
        (2, LOCAL),
        (3, None),
        (3, LOCAL),
        (4, None),
        (4, LOCAL),
        (5, None),
        (5, LOCAL),
    ]
    assert harness.events[-1].kind == "errored"


@pytest.mark.parametrize("jitter", [ScriptedJitter(0.0, 0.0, 0.0)])
async def test_no_dispatch_starts_ten_minutes_after_the_request(harness: Harness) -> None:
    slow = await harness.engine("error", advance_s=250.0)
    harness.table(target(LOCAL, slow.url, "local"))
    started = harness.clock.now

    status, _ = await harness.chat()

    # Dispatches at 0, 251 and 503 s; the third fails at 753 s, past the 600 s budget.
    assert slow.received == 3
    assert harness.clock.sleeps == [1.0, 2.0]
    assert harness.clock.now - started == 753.0
    assert status == 500, "the last failure is the answer"


@pytest.mark.parametrize("jitter", [ScriptedJitter(0.0)])
async def test_a_round_that_would_end_past_the_deadline_is_not_waited_for(
    harness: Harness,
) -> None:
    slow = await harness.engine("error", advance_s=599.5)
    harness.table(target(LOCAL, slow.url, "local"))

    status, _ = await harness.chat()

    assert slow.received == 1 and harness.clock.sleeps == []
    assert status == 500


@pytest.mark.parametrize("policy", [RetryPolicy(max_dispatches=1)])
async def test_an_owner_that_answered_busy_is_held_off_by_the_clock(harness: Harness) -> None:
    busy = await harness.engine("busy")
    harness.table(target(LOCAL, busy.url, "local"))
    status, _ = await harness.chat()
    assert status == 503 and busy.received == 1
    jobs = len(harness.events)

    held = await harness.client.post("/api/chat", json={"model": "m"})
    assert held.status == 503 and held.headers["Retry-After"] == "2"
    assert len(harness.events) == jobs and busy.received == 1, "no job, nothing sent"

    harness.clock.now += 2.0
    assert harness.router.busy_reply(owners(harness.router.table, "m")) is None


async def test_an_attempt_whose_target_leaves_the_table_ends_itself_and_fails_over(
    harness: Harness,
) -> None:
    hanging = await harness.engine("hang")
    healthy = await harness.engine("ok")
    other = target("node-c", healthy.url)
    harness.table(target("node-b", hanging.url), other, pins={"ollama": "node-b"})
    request = asyncio.create_task(harness.chat())
    await asyncio.wait_for(hanging.arrived.wait(), 5)

    harness.table(other)
    status, body = await request

    assert status == 200 and body.endswith(DONE_LINE)
    assert harness.trail() == [
        ("submitted", 1, "node-b"),
        ("submitted", 2, "node-c"),
        ("started", 2, "node-c"),
        ("completed", 2, None),
    ]
    await asyncio.wait_for(hanging.cancelled.wait(), 5)  # its engine saw the request go away
    assert harness.clock.sleeps == []


async def test_unless_gone_cancels_only_its_own_work_when_the_node_goes() -> None:
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def hanging_work() -> Commit | Failure:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    gone = Gone()
    caller = asyncio.create_task(unless_gone(hanging_work(), gone, "node-b"))
    await running.wait()
    gone.set()

    assert await asyncio.wait_for(caller, 5) == Failure("target-gone", "node node-b left the table")
    assert cancelled.is_set()
    assert caller.cancelling() == 0, "nobody cancelled the attempt's caller"


async def test_unless_gone_keeps_an_outcome_that_came_first() -> None:
    gone = Gone()

    async def failing_work() -> Commit | Failure:
        gone.set()  # the node leaves just as the answer arrives
        return Failure("status", "the engine answered 500", status=500)

    outcome = await unless_gone(failing_work(), gone, "node-b")
    assert outcome == Failure("status", "the engine answered 500", status=500)
    await asyncio.sleep(0.01)  # a departure that came too late cancels nothing afterwards
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_client_that_goes_away_cancels_the_attempts_work() -> None:
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def hanging_work() -> Commit | Failure:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    caller = asyncio.create_task(unless_gone(hanging_work(), Gone(), "node-b"))
    await running.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert cancelled.is_set()


def test_departures_signal_only_the_nodes_that_left_and_forget_them() -> None:
    departures = Departures()
    with departures.watch("b") as b_gone, departures.watch("c") as c_gone:
        with departures.watch("b") as b_again:
            assert b_again is b_gone, "one event per node"
        departures.table_changed({"a", "c"})
        assert b_gone.is_set() and not c_gone.is_set()
        with departures.watch("b") as b_back:
            assert not b_back.is_set(), "a node that came back is watched afresh"
        assert len(departures) == 1
    assert len(departures) == 0


def _table_changes_while_waiting(harness: Harness, *targets: RouteTarget) -> None:
    """The first backoff is when the table changes to ``targets`` (then time moves on)."""

    async def sleep(seconds: float) -> None:
        harness.clock.sleeps.append(seconds)
        harness.clock.now += seconds
        if len(harness.clock.sleeps) == 1:
            harness.table(*targets)
        await asyncio.sleep(0)

    harness.clock.sleep = sleep  # type: ignore[method-assign]


async def test_a_model_that_leaves_every_node_mid_request_is_answered_at_once(
    harness: Harness,
) -> None:
    # Its only engine is being stopped: still in the table, no longer listening. A request
    # that reached it then used to wait, round after round, up to ten minutes.
    with refusing_port() as dead:
        harness.table(target(LOCAL, f"http://127.0.0.1:{dead}", "local"))
        _table_changes_while_waiting(harness)  # the stop is done: no engine listed
        status, body = await harness.chat()

    assert status == 404, "no engine has it any more: not found, on every door"
    assert json.loads(body)["error"] == "model 'm' not found"
    assert harness.events[-1].kind == "errored"
    assert len(harness.clock.sleeps) == 1, "it did not wait round after round"


async def test_a_model_no_node_lists_any_more_is_not_found_at_once(harness: Harness) -> None:
    other = await harness.engine("ok")
    with refusing_port() as dead:
        harness.table(target(LOCAL, f"http://127.0.0.1:{dead}", "local"))
        rest = RouteTarget(node_id="node-b", kind="engine", base_url=other.url, models=["x"])
        _table_changes_while_waiting(harness, rest)
        status, body = await harness.chat()

    assert status == 404
    assert json.loads(body) == {"error": "model 'm' not found"}
    assert len(harness.clock.sleeps) == 1 and other.received == 0


async def test_a_model_whose_member_is_coming_back_is_waited_for(harness: Harness) -> None:
    back = await harness.engine("ok")
    with refusing_port() as dead:
        harness.table(target("node-b", f"http://127.0.0.1:{dead}"))
        away = AwayModels(node_id="node-b", name="gpu-box", engine="ollama", models=["m"])
        waited: list[float] = []

        async def sleep(seconds: float) -> None:
            waited.append(seconds)
            harness.clock.now += seconds
            if len(waited) == 1:
                harness.table(away=[away])  # restarting: listed as away
            elif len(waited) == 2:
                harness.table(target("node-b", back.url))  # back
            await asyncio.sleep(0)

        harness.clock.sleep = sleep  # type: ignore[method-assign]
        status, body = await harness.chat()

    assert status == 200 and body.endswith(DONE_LINE)
    assert len(waited) == 2
