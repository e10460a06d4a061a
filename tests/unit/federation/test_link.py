"""``MemberLink`` (the dialling side) against B's real member-RPC server over mutual TLS: what it
mirrors (engines with progress, B's own errors, the jobs B received), how a gap in a numbered
stream or an ``errors:update`` makes it read again, what a member that does not answer looks
like (one unreachable error, calls refused) and that calls on a live link get B's answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from backend.components.federation import link as link_module
from backend.components.federation.link import (
    MIRRORED_JOBS,
    UNREACHABLE_ID,
    LinkSinks,
    MemberLink,
)
from backend.core.rpc import NumberedStream
from backend.protocol import errors, methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.broker import ErrorClear, ServiceError
from backend.protocol.types.engines import (
    EngineEvent,
    EngineLogs,
    EngineLogsQuery,
    EngineModels,
    EngineRef,
    EngineSchedulerChanged,
    EngineSetPort,
    EnginesSnapshot,
    EngineStateChanged,
    EngineStatus,
    MemberEngines,
    MemberEnginesChanged,
    NodeScope,
    PullProgress,
    PullProgressed,
)
from backend.protocol.types.jobs import (
    JobRecord,
    JobRemoved,
    JobsEvent,
    JobsQuery,
    JobsSnapshot,
    JobUpserted,
)
from backend.protocol.types.scheduler import ModelQueue, SchedulerState, SchedulerStates
from tests.fakes import FakeClock
from tests.unit.cluster.harness import A_ID, B_ID, C_ID, free_port
from tests.unit.federation.member_server import MemberServer, member_server, until

NOW = 1_700_000_000.0
OLLAMA = EngineName("ollama")
LLAMACPP = EngineName("llamacpp")


def quick_clock() -> FakeClock:
    """The link's clock: time stands still; backoff sleeps are recorded and last 10 ms."""
    return FakeClock(NOW, on_sleep="brief")


def status(engine: str = "ollama", state: str = "running", port: int = 11500) -> EngineStatus:
    """An engine's status as a member's engines component would answer."""
    return EngineStatus(
        engine=EngineName(engine),
        display_name=engine.title(),
        front_door=engine,
        mode="process",
        installed=True,
        state=state,  # type: ignore[arg-type]
        port=port,
        default_port=port,
    )


def models(*names: str) -> EngineModels:
    return EngineModels(
        models=list(names),
        by_engine={OLLAMA: list(names)},
        loaded_by_engine={},
        slots_by_engine={},
    )


def job(key: str, origin: NodeId = B_ID, state: str = "in_flight", seq: int = 1) -> JobRecord:
    return JobRecord(
        key=JobKey(key),
        engine=OLLAMA,
        model="llama3",
        origin=origin,
        run_id="run1",
        state=state,  # type: ignore[arg-type]
        created_at=NOW,
        seq=seq,
    )


def error(error_id: str, node: NodeId = B_ID, message: str = "disk full") -> ServiceError:
    return ServiceError(id=error_id, node_id=node, message=message, created_at=NOW, updated_at=NOW)


class ScriptedMember:
    """B's streams as its engines, jobs and errors components would serve them."""

    def __init__(self, server: MemberServer) -> None:
        self.hub = server.hub
        self.engine_events: NumberedStream[EngineEvent] = NumberedStream(
            methods.ENGINE_EVENT, server.hub
        )
        self.job_events: NumberedStream[JobsEvent] = NumberedStream(methods.JOBS_EVENT, server.hub)
        self.engines = [status("ollama")]
        self.models = models("llama3")
        self.jobs: list[JobRecord] = []
        self.errors: list[ServiceError] = []
        self.engine_subscribes = 0
        self.job_queries: list[JobsQuery] = []
        self.error_fetches = 0
        self.calls: list[EngineRef] = []
        dispatcher = server.dispatcher
        dispatcher.add(methods.ENGINE_SUBSCRIBE, self._engine_subscribe)
        dispatcher.add(methods.JOBS_SUBSCRIBE, self._jobs_subscribe)
        dispatcher.add(methods.ERRORS_GET_INITIAL, self._errors)
        dispatcher.add(methods.ENGINE_STATUS, self._status)
        dispatcher.add(methods.ENGINE_LIST, self._list)
        dispatcher.add(methods.ENGINE_SET_PORT, self._set_port)
        dispatcher.add(methods.ERRORS_CLEAR, self._clear)
        self.cleared: list[ErrorClear] = []

    async def _engine_subscribe(self, params: NoParams, peer: RpcPeer) -> EnginesSnapshot:
        self.engine_subscribes += 1
        seq = self.engine_events.subscribe(peer)
        return EnginesSnapshot(seq=seq, engines=list(self.engines), models=self.models)

    async def _jobs_subscribe(self, params: JobsQuery, peer: RpcPeer) -> JobsSnapshot:
        self.job_queries.append(params)
        seq = self.job_events.subscribe(peer)
        return JobsSnapshot(seq=seq, jobs=list(self.jobs))

    async def _errors(self, params: NoParams, peer: RpcPeer) -> list[ServiceError]:
        self.error_fetches += 1
        return list(self.errors)

    async def _status(self, params: EngineRef, peer: RpcPeer) -> EngineStatus:
        self.calls.append(params)
        return status(params.engine, port=11600)

    async def _list(self, params: NodeScope, peer: RpcPeer) -> list[EngineStatus]:
        return list(self.engines)

    async def _set_port(self, params: EngineSetPort, peer: RpcPeer) -> EngineStatus:
        raise errors.Conflict(f"port {params.port} is already in use")

    async def _clear(self, params: ErrorClear, peer: RpcPeer) -> None:
        self.cleared.append(params)

    def pull(self, progress: PullProgress) -> None:
        self.engine_events.publish(lambda seq: PullProgressed(seq=seq, progress=progress))

    def engine(self, engine: EngineStatus) -> None:
        self.engine_events.publish(lambda seq: EngineStateChanged(seq=seq, status=engine))

    def upsert(self, record: JobRecord) -> None:
        self.job_events.publish(lambda seq: JobUpserted(seq=seq, key=record.key, job=record))

    def remove(self, key: str) -> None:
        self.job_events.publish(lambda seq: JobRemoved(seq=seq, key=JobKey(key)))


class Sinks:
    """Everything the link hands to this node, in order."""

    def __init__(self) -> None:
        self.engines: list[MemberEngines] = []
        self.errors: list[tuple[NodeId, list[ServiceError]]] = []
        self.jobs: list[tuple[NodeId, list[JobRecord], bool]] = []
        self.removed: list[tuple[NodeId, JobKey]] = []

    def link_sinks(self, also: Callable[[MemberEngines], None] | None = None) -> LinkSinks:
        """The sinks for a link; ``also`` gets every engines state too (a board)."""

        def engines(state: MemberEngines) -> None:
            self.engines.append(state)
            if also is not None:
                also(state)

        return LinkSinks(
            engines=engines,
            errors=lambda node, entries: self.errors.append((node, list(entries))),
            jobs=lambda node, jobs, complete: self.jobs.append((node, list(jobs), complete)),
            job_removed=lambda node, key: self.removed.append((node, key)),
        )

    def last(self) -> MemberEngines:
        return self.engines[-1]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[MemberServer]:
    async with member_server(tmp_path) as server:
        yield server


@pytest.fixture
def member(server: MemberServer) -> ScriptedMember:
    return ScriptedMember(server)


@contextlib.asynccontextmanager
async def running_link(
    server: MemberServer,
    sinks: Sinks,
    clock: FakeClock | None = None,
    addresses: Callable[[], list[tuple[str, int]]] | None = None,
) -> AsyncIterator[MemberLink]:
    """A's link to B, running until the block ends."""
    link = MemberLink(
        server.a.service.membership.members[B_ID],
        credentials=server.a.credentials,
        addresses=addresses or server.addresses,
        sinks=sinks.link_sinks(),
        clock=clock if clock is not None else quick_clock(),
    )
    task = asyncio.create_task(link.run())
    try:
        yield link
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5.0)


async def test_the_link_publishes_the_members_engines_as_reachable(
    server: MemberServer, member: ScriptedMember
) -> None:
    member.engines = [status("ollama"), status("llamacpp", "stopped", 11501)]
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        published = sinks.last()
        assert published == MemberEngines(
            node_id=B_ID,
            name="laptop",
            reachable=True,
            engines=[status("llamacpp", "stopped", 11501), status("ollama")],  # by engine
            models=models("llama3"),
        )
        assert link.state == published
        assert member.job_queries == [JobsQuery(limit=MIRRORED_JOBS, origin=B_ID)]
        member.engine(status("ollama", "stopping"))
        await until(lambda: sinks.last().engines[1].state == "stopping")
        assert sinks.last().reachable
    assert not link.state.reachable, "a link that stopped is not shown as up"


async def test_pull_progress_is_mirrored_and_a_done_pull_is_shown_once(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    halfway = PullProgress(engine=OLLAMA, model="phi3", stage="downloading", percent=50.0)
    done = PullProgress(engine=OLLAMA, model="phi3", stage="success", percent=100.0, done=True)
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        member.pull(halfway)
        await until(lambda: sinks.last().pulls == [halfway])
        member.pull(done)
        await until(lambda: sinks.last().pulls == [done])
        assert link.state.pulls == [], "a done pull is no longer in progress"
        member.engine(status("ollama", "stopped"))
        await until(lambda: sinks.last().engines[0].state == "stopped")
        assert sinks.last().pulls == []
    shown_done = [state for state in sinks.engines if done in state.pulls]
    assert len(shown_done) == 1


async def test_a_gap_in_the_engine_stream_makes_the_link_read_fresh_snapshots(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: member.error_fetches == 1)
        assert (member.engine_subscribes, len(member.job_queries)) == (1, 1)
        member.engine(status("ollama", "stopping"))
        await until(lambda: sinks.last().engines[0].state == "stopping")
        member.engines = [status("ollama", "stopped")]  # what the missed event would have said
        member.engine_events.seq += 1  # one event the link never gets
        member.pull(PullProgress(engine=OLLAMA, model="phi3", stage="downloading"))
        await until(lambda: member.engine_subscribes == 2)
        await until(lambda: len(member.job_queries) == 2 and sinks.last().reachable)
        assert sinks.last().engines == [status("ollama", "stopped")]
        assert sinks.last().pulls == [], "the event after the gap was not applied"
        assert [complete for _, _, complete in sinks.jobs] == [True, True]
        assert link.state.reachable
        assert not any(entries for _, entries in sinks.errors), "a resync is not unreachable"


async def test_a_gap_in_the_jobs_stream_makes_the_link_read_fresh_snapshots(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    member.jobs = [job(f"{B_ID}/run1/1")]
    async with running_link(server, sinks):
        await until(lambda: len(sinks.jobs) == 1)
        member.jobs = [job(f"{B_ID}/run1/1", state="completed", seq=3)]
        member.job_events.seq += 1
        member.upsert(job(f"{B_ID}/run1/2"))
        await until(lambda: len(sinks.jobs) == 2)
        assert sinks.jobs[1] == (B_ID, [job(f"{B_ID}/run1/1", state="completed", seq=3)], True)
        assert member.engine_subscribes == 2
        await asyncio.sleep(0.05)
        assert len(sinks.jobs) == 2, "the event after the gap was not applied"


async def test_the_members_errors_are_fetched_again_on_errors_update_and_only_its_own_kept(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    own = error("engine:ollama", B_ID)
    member.errors = [own, error("engine:ollama", C_ID, "C's, as B mirrors it"), error("x", A_ID)]
    async with running_link(server, sinks):
        await until(lambda: bool(sinks.errors))
        assert sinks.errors == [(B_ID, [own])]
        later = error("settings:corrupt", B_ID, "settings.json was unreadable")
        member.errors = [error("y", C_ID), later]
        server.hub.broadcast(methods.ERRORS_UPDATE, member.errors)
        await until(lambda: len(sinks.errors) == 2)
        assert sinks.errors[1] == (B_ID, [later])
        assert member.error_fetches == 2
        member.errors = []
        server.hub.broadcast(methods.ERRORS_UPDATE, [])
        await until(lambda: len(sinks.errors) == 3)
        assert sinks.errors[2] == (B_ID, [])


async def test_jobs_of_other_origins_are_not_mirrored_and_removals_are_passed_on(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    own = job(f"{B_ID}/run1/1")
    member.jobs = [own]
    async with running_link(server, sinks):
        await until(lambda: len(sinks.jobs) == 1)
        assert sinks.jobs == [(B_ID, [own], True)]
        member.upsert(job(f"{C_ID}/run7/1", origin=C_ID))  # C's job as B mirrors it
        member.upsert(job(f"{A_ID}/run2/4@1", origin=A_ID))  # a relay B serves for A
        running = job(f"{B_ID}/run1/1", state="running", seq=2)
        member.upsert(running)
        member.remove(f"{B_ID}/run1/0")
        await until(lambda: bool(sinks.removed))
        assert sinks.jobs == [(B_ID, [own], True), (B_ID, [running], False)]
        assert sinks.removed == [(B_ID, JobKey(f"{B_ID}/run1/0"))]


async def test_a_member_that_does_not_answer_is_one_unreachable_error_and_refuses_calls(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    clock = quick_clock()
    dead = [("127.0.0.1", free_port())]
    async with running_link(server, sinks, clock, addresses=lambda: dead) as link:
        await until(lambda: len(clock.sleeps) >= 4)
        assert clock.sleeps[:4] == [1.0, 2.0, 4.0, 8.0]
        assert len(sinks.errors) == 1, "one error however often the link tries"
        node, entries = sinks.errors[0]
        assert node == B_ID and len(entries) == 1
        entry = entries[0]
        assert (entry.id, entry.node_id, entry.severity) == (UNREACHABLE_ID, B_ID, "warning")
        assert (entry.created_at, entry.updated_at) == (NOW, NOW)
        assert "laptop" in entry.message
        assert not sinks.last().reachable and sinks.last().error
        assert not link.state.reachable
        with pytest.raises(errors.Unavailable, match="laptop is unreachable"):
            await link.call(methods.ENGINE_STATUS, EngineRef(engine=OLLAMA))
    assert member.engine_subscribes == 0


async def test_a_member_that_comes_back_replaces_the_unreachable_error_with_its_own(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    clock = quick_clock()
    where = [("127.0.0.1", free_port())]
    member.errors = [error("engine:ollama", B_ID)]
    async with running_link(server, sinks, clock, addresses=lambda: where) as link:
        await until(lambda: bool(sinks.errors))
        assert sinks.errors[0][1][0].id == UNREACHABLE_ID
        where[:] = server.addresses()
        await until(lambda: len(sinks.errors) == 2)
        assert sinks.errors[1] == (B_ID, [error("engine:ollama", B_ID)])
        assert link.state.reachable and link.state.error is None
        answer = await link.call(methods.ENGINE_STATUS, EngineRef(engine=OLLAMA))
        assert answer == status("ollama", port=11600)
        await server.b.service.roster.remove(A_ID)  # down again: a new unreachable error
        await until(lambda: len(sinks.errors) == 3)
        assert sinks.errors[2][1][0].id == UNREACHABLE_ID


async def test_a_member_that_stops_trusting_this_node_drops_the_link_and_is_unreachable(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        await server.b.service.roster.remove(A_ID)
        await until(lambda: bool(sinks.errors) and sinks.errors[-1][1] != [])
        assert sinks.errors[-1][1][0].id == UNREACHABLE_ID
        assert not link.state.reachable
        with pytest.raises(errors.Unavailable):
            await link.call(methods.ENGINE_LIST, NodeScope())


async def test_calls_on_a_live_link_get_the_members_typed_answers_and_errors(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        answer = await link.call(methods.ENGINE_STATUS, EngineRef(engine=LLAMACPP))
        assert isinstance(answer, EngineStatus)
        assert answer == status("llamacpp", port=11600)
        assert member.calls == [EngineRef(engine=LLAMACPP)]
        assert await link.call(methods.ENGINE_LIST, NodeScope()) == [status("ollama")]
        with pytest.raises(errors.Conflict) as refused:
            await link.call(methods.ENGINE_SET_PORT, EngineSetPort(engine=OLLAMA, port=5))
        assert refused.value.message == "port 5 is already in use"


async def test_what_the_member_mirrors_of_others_is_not_passed_on(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks):
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        count = len(sinks.engines)
        other = MemberEngines(node_id=C_ID, name="gpu-box", reachable=True)
        member.engine_events.publish(lambda seq: MemberEnginesChanged(seq=seq, member=other))
        member.engine(status("ollama", "stopped"))  # the next event still applies: no gap
        await until(lambda: sinks.last().engines[0].state == "stopped")
        assert len(sinks.engines) == count + 1
        assert all(state.node_id == B_ID for state in sinks.engines)
        assert member.engine_subscribes == 1


async def test_the_members_scheduler_events_are_counted_and_ignored(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    queue = ModelQueue(model="llama3", running=1, waiting=2)
    busy = SchedulerStates(
        engines=[SchedulerState(engine=OLLAMA, running=1, waiting=2, queues=[queue])]
    )
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        count = len(sinks.engines)
        for _ in range(3):
            member.engine_events.publish(
                lambda seq: EngineSchedulerChanged(seq=seq, scheduler=busy)
            )
        member.engine(status("ollama", "stopped"))  # the next event still applies: no gap
        await until(lambda: sinks.last().engines[0].state == "stopped")
        assert len(sinks.engines) == count + 1, "a scheduler event is not news for the board"
        assert member.engine_subscribes == 1
        assert link.state.reachable


async def test_an_engine_event_of_a_kind_this_node_does_not_know_is_skipped(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    async with running_link(server, sinks):
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        for peer in list(member.engine_events._subscribers):  # a newer member's event kind
            member.engine_events.seq += 1
            peer.notify(
                methods.ENGINE_EVENT.name,
                {"seq": member.engine_events.seq, "event": "weather_changed", "sky": "blue"},
            )
        member.engine(status("ollama", "stopped"))
        await until(lambda: sinks.last().engines[0].state == "stopped")
        assert member.engine_subscribes == 1, "the link was not read again"


async def test_a_retired_link_tells_the_sinks_nothing_more(
    server: MemberServer, member: ScriptedMember
) -> None:
    sinks = Sinks()
    member.errors = [error("engine:ollama", B_ID)]
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.errors) and sinks.last().reachable)
        counts = (len(sinks.engines), len(sinks.errors), len(sinks.jobs))
        link.retire()
        member.engine(status("ollama", "stopped"))
        member.upsert(job(f"{B_ID}/run1/1"))
        server.hub.broadcast(methods.ERRORS_UPDATE, member.errors)
        await until(lambda: member.error_fetches == 2)
        await asyncio.sleep(0.05)
    assert (len(sinks.engines), len(sinks.errors), len(sinks.jobs)) == counts
    assert sinks.removed == []


async def test_a_slow_member_holds_only_its_own_call_and_that_call_is_bounded(
    server: MemberServer, member: ScriptedMember, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member that never answers one call: the call ends with Unavailable naming it after its
    bound, and other calls on the same link are answered meanwhile."""
    never = asyncio.Event()

    async def stuck(params: EngineLogsQuery, peer: RpcPeer) -> EngineLogs:
        await never.wait()
        raise AssertionError("never answered")

    server.dispatcher.add(methods.ENGINE_LOGS, stuck)
    monkeypatch.setattr(link_module, "SHORT_CALL_S", 0.5)
    sinks = Sinks()
    async with running_link(server, sinks) as link:
        await until(lambda: bool(sinks.engines) and sinks.last().reachable)
        slow = asyncio.create_task(link.call(methods.ENGINE_LOGS, EngineLogsQuery(engine=OLLAMA)))
        answer = await link.call(methods.ENGINE_STATUS, EngineRef(engine=LLAMACPP))
        assert answer == status("llamacpp", port=11600)
        assert not slow.done(), "the slow call is still waiting; the other one was not held"
        with pytest.raises(errors.Unavailable, match=r"did not answer engine:logs within 0\.5 s"):
            await slow
        assert sinks.last().reachable, "a slow answer is not an unreachable member"
        never.set()
