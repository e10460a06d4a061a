"""The jobs component on a real store: reports in and out of order, pushes, persistence,
restart, the proxy exiting, the bounded history and the load per node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import msgspec
import pytest

from backend.components.jobs.component import JobsComponent
from backend.components.jobs.state import INTERRUPTED, Job
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.jobs import JobEvent, JobEventKind, JobRecord
from tests.fakes import FakeClock
from tests.unit.components.jobs_rig import Subscriber, running

KEY = "me/run1/1"


class Harness:
    def __init__(
        self, store: Store, *, keep_finished: int = 1000, gap_timeout: float = 3.0
    ) -> None:
        self.clock = FakeClock(1_000.0, on_sleep="brief")  # time moves only when set
        self.events = NumberedStream(methods.JOBS_EVENT, ClientHub())
        self.subscriber = Subscriber()
        self.events.subscribe(cast(RpcPeer, self.subscriber))
        self.table = JobRecordStore(store, keep_finished=keep_finished)
        self.component = JobsComponent(
            store=self.table,
            clock=self.clock,
            node_id="me",
            events=self.events,
            gap_timeout=gap_timeout,
        )

    def send(self, seq: int, kind: JobEventKind, **fields: Any) -> None:
        self.component.on_job_event(report(seq, kind, **fields))

    def job(self, key: str = KEY) -> JobRecord:
        return next(w for w in self.component.records(1000) if w.key == key)

    def listed(self) -> list[str]:
        return [w.key for w in self.component.records(1000)]


def report(
    seq: int, kind: JobEventKind, *, key: str = KEY, attempt: int = 1, **fields: Any
) -> dict[str, Any]:
    """A report as the proxy worker sends it."""
    header: dict[str, Any] = {
        "engine": "ollama",
        "model": "llama3",
        "origin": "me",
        "run_id": "run1",
        "created_at": 100.0 + int(key.rsplit("/", 1)[-1]),
        "path": "/api/chat",
        "at": 100.0 + seq,
    }
    header.update(fields)
    event = JobEvent(key=key, seq=seq, kind=kind, attempt=attempt, **header)
    return cast(dict[str, Any], msgspec.to_builtins(event))


async def eventually(check: Callable[[], Any]) -> None:
    for _ in range(500):
        if await check() if asyncio.iscoroutinefunction(check) else check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met within 5 s")


async def rows(store: Store) -> dict[str, tuple[Any, ...]]:
    found = await store.fetch_all("SELECT key, state, error, seq, serving FROM jobs")
    return {row[0]: row[1:] for row in found}


async def test_reports_in_order_push_one_upsert_each_with_the_stream_seq(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="gpu-box")
    h.send(2, "started", node="gpu-box")
    h.send(3, "completed")
    assert [event.seq for event in h.subscriber.events] == [1, 2, 3]
    assert h.subscriber.states() == [(KEY, "in_flight"), (KEY, "running"), (KEY, "completed")]
    last = h.subscriber.events[-1]
    assert (_tag(last), last.key) == ("upsert", KEY)
    assert last.job is not None
    assert (last.job.serving, last.job.started_at, last.job.completed_at) == (
        "gpu-box",
        102.0,
        103.0,
    )
    assert (last.job.run_id, last.job.path, last.job.model) == (
        "run1",
        "/api/chat",
        "llama3",
    )


async def test_out_of_order_reports_wait_for_the_missing_ones(store: Store) -> None:
    h = Harness(store)
    h.send(2, "started", node="a")
    assert (h.job().state, h.job().seq) == ("in_flight", 0), "shown from its header, waiting"
    h.send(1, "submitted", target="a")
    assert (h.job().state, h.job().seq) == ("running", 2)
    h.send(4, "completed")
    assert h.job().state == "running"
    h.send(3, "submitted", target=None)
    assert (h.job().state, h.job().seq) == ("completed", 4)
    assert h.subscriber.states() == [(KEY, "in_flight"), (KEY, "running"), (KEY, "completed")]


async def test_duplicates_change_nothing_and_push_nothing(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="a")
    h.send(1, "submitted", target="a")
    h.send(3, "completed")
    h.send(3, "completed")
    h.send(2, "started", node="a")
    h.send(2, "started", node="a")
    assert h.subscriber.states() == [(KEY, "in_flight"), (KEY, "completed")]


async def test_failover_returns_to_in_flight_and_late_reports_of_the_left_attempt_are_ignored(
    store: Store,
) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="a")
    h.send(2, "started", node="a")
    assert h.component.pending_by_node() == {"a": 1}
    h.send(3, "submitted", attempt=2, target="b")
    assert (h.job().state, h.job().attempt, h.job().target, h.job().serving) == (
        "in_flight",
        2,
        "b",
        None,
    )
    assert h.component.pending_by_node() == {"b": 1}
    h.send(4, "errored", attempt=1, error="a died")
    h.send(5, "started", attempt=1, node="a")
    assert (h.job().state, h.job().serving, h.job().seq) == ("in_flight", None, 5)
    h.send(6, "started", attempt=2, node="b")
    h.send(7, "completed", attempt=2)
    assert (h.job().state, h.job().serving) == ("completed", "b")


async def test_a_failover_to_another_engine_family_shows_the_engine_serving_it(
    store: Store,
) -> None:
    h = Harness(store)
    h.send(1, "submitted", engine="llamacpp", target="a")
    assert h.job().engine == "llamacpp"
    h.send(2, "submitted", attempt=2, engine="ollama", target="b")
    assert (h.job().engine, h.job().target) == ("ollama", "b")
    h.send(3, "errored", attempt=1, engine="llamacpp", error="a died")
    h.send(4, "started", attempt=2, engine="ollama", node="b")
    h.send(5, "completed", attempt=2, engine="ollama")
    assert (h.job().state, h.job().engine) == ("completed", "ollama")


async def test_a_finished_job_never_moves_back(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="a")
    h.send(2, "errored", error="client left", cancelled=True)
    pushed = len(h.subscriber.events)
    h.send(3, "started", node="a")
    h.send(4, "completed")
    h.send(5, "submitted", attempt=2, target="b")
    assert (h.job().state, h.job().error) == ("cancelled", "client left")
    assert len(h.subscriber.events) == pushed


@pytest.mark.parametrize(
    "params",
    [
        None,
        [],
        "submitted",
        {"key": KEY, "seq": 1},
        {**report(1, "submitted"), "kind": "exploded"},
        {**report(1, "submitted"), "seq": "one"},
        report(0, "submitted"),
        {**report(1, "submitted"), "key": ""},
        report(1, "submitted", attempt=-1),
        report(1, "started"),
    ],
)
async def test_malformed_reports_are_logged_and_dropped(
    store: Store, params: Any, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(store)
    with caplog.at_level(logging.WARNING):
        h.component.on_job_event(params)
    assert h.component.records(10) == []
    assert h.subscriber.events == []
    assert "proxy:jobs" in caplog.text


async def test_a_lost_report_does_not_leave_the_job_stuck(store: Store) -> None:
    h = Harness(store, gap_timeout=3.0)
    h.send(1, "submitted", target="a")
    h.send(3, "completed")  # 2 never comes
    async with running(h.component):
        await asyncio.sleep(0.05)
        assert h.job().state == "in_flight"
        h.clock.now += 3.0
        await eventually(lambda: h.job().state == "completed")
    assert h.component.pending_by_node() == {}


async def test_the_final_state_is_written_while_running(store: Store) -> None:
    h = Harness(store)
    async with running(h.component):
        h.send(1, "submitted", target="a")
        h.send(2, "started", node="a")
        h.send(3, "completed")

        async def written() -> bool:
            return (await rows(store)).get(KEY) == ("completed", None, 3, "a")

        await eventually(written)


async def test_stopping_writes_what_is_pending(store: Store) -> None:
    h = Harness(store)
    async with running(h.component):
        h.send(1, "submitted", target="a")
        h.send(2, "errored", error="engine said no")
    assert (await rows(store))[KEY] == ("failed", "engine said no", 2, None)


async def test_a_restart_marks_unfinished_jobs_interrupted(store: Store) -> None:
    before = Harness(store)
    before.send(1, "submitted", key="me/run1/1", target="a")
    before.send(2, "started", key="me/run1/1", node="a")
    before.send(1, "submitted", key="me/run1/2", target="b")
    before.send(2, "completed", key="me/run1/2")
    await before.component.write_pending()

    after = Harness(store)
    after.clock.now = 5_000.0
    async with running(after.component):
        pass
    interrupted = after.job("me/run1/1")
    assert (interrupted.state, interrupted.error, interrupted.completed_at) == (
        "failed",
        INTERRUPTED,
        5_000.0,
    )
    assert after.job("me/run1/2").state == "completed"
    assert ("me/run1/1", "failed") in after.subscriber.states()
    stored = await rows(store)
    assert stored["me/run1/1"][:2] == ("failed", INTERRUPTED)
    assert stored["me/run1/2"][0] == "completed"


async def test_a_job_whose_request_waits_for_the_next_worker_stays_open(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", key="me/run1/1", target="a")
    h.send(2, "started", key="me/run1/1", node="a")
    h.send(1, "submitted", key="me/run1/2", target="a")
    h.send(4, "submitted", key="me/run1/2", target="b")  # 2 and 3 still missing
    h.send(1, "submitted", key="me/run1/3", target="a")
    h.send(2, "completed", key="me/run1/3")
    # The custody desk asks where each job stands, counting events waiting for a gap.
    assert h.component.progress("me/run1/1") == (2, h.job("me/run1/1").attempt)
    assert h.component.progress("me/run1/2") is not None
    assert h.component.progress("me/run1/2")[0] == 4  # type: ignore[index]
    assert h.component.progress("me/run1/3") is None, "a finished job has no progress"
    assert h.component.progress("me/run1/9") is None
    h.component.fail_unfinished("proxy exited", keep={"me/run1/2"})
    assert h.job("me/run1/1").state == "failed"
    assert h.job("me/run1/2").state == "in_flight", "a kept job was failed"
    # The next worker goes on with the kept job's events.
    h.send(2, "submitted", key="me/run1/2", target="a")
    h.send(3, "started", key="me/run1/2", node="a")
    h.send(5, "started", key="me/run1/2", node="b")
    h.send(6, "completed", key="me/run1/2")
    assert h.job("me/run1/2").state == "completed"


async def test_the_proxy_exiting_fails_every_unfinished_job(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", key="me/run1/1", target="a")
    h.send(2, "started", key="me/run1/1", node="a")
    h.send(1, "submitted", key="me/run1/2", target="b")
    h.send(1, "submitted", key="me/run1/3", target="a")
    h.send(2, "completed", key="me/run1/3")
    h.send(1, "submitted", key="me/run1/4", target="a")
    h.send(3, "started", key="me/run1/4", node="a")  # 2 still missing
    pushed = len(h.subscriber.events)
    h.component.fail_unfinished("proxy exited")
    assert sorted(h.subscriber.states()[pushed:]) == [
        ("me/run1/1", "failed"),
        ("me/run1/2", "failed"),
        ("me/run1/4", "failed"),
    ]
    assert h.component.pending_by_node() == {}
    h.send(2, "submitted", key="me/run1/4", target="a")
    assert h.job("me/run1/4").error == "proxy exited"
    await h.component.write_pending()
    stored = await rows(store)
    assert [stored[f"me/run1/{n}"][:2] for n in (1, 2, 3)] == [
        ("failed", "proxy exited"),
        ("failed", "proxy exited"),
        ("completed", None),
    ]


async def test_history_is_bounded_and_pruned_jobs_are_pushed_as_removed(store: Store) -> None:
    h = Harness(store, keep_finished=3)
    h.send(1, "submitted", key="me/run1/1", target="a")  # the oldest, still running
    for n in range(2, 7):
        h.send(1, "submitted", key=f"me/run1/{n}", target="a")
        h.send(2, "completed", key=f"me/run1/{n}")
    removed = [event.key for event in h.subscriber.events if _tag(event) == "remove"]
    assert removed == ["me/run1/2", "me/run1/3"]
    assert h.listed() == [f"me/run1/{n}" for n in (6, 5, 4, 1)]
    h.send(3, "started", key="me/run1/2", node="a")
    assert "me/run1/2" not in h.listed(), "a late report cannot bring it back"
    await h.component.write_pending()
    assert sorted(await rows(store)) == ["me/run1/1", "me/run1/4", "me/run1/5", "me/run1/6"]


async def test_pending_by_node_counts_where_unfinished_jobs_are(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", key="me/run1/1", target="a")
    h.send(1, "submitted", key="me/run1/2", target="a")
    h.send(2, "started", key="me/run1/2", node="b")
    h.send(1, "submitted", key="me/run1/3", target=None)
    h.send(1, "submitted", key="me/run1/4", target="a")
    h.send(2, "completed", key="me/run1/4")
    h.send(1, "submitted", key="me/run1/5", target="b")
    assert h.component.pending_by_node() == {"a": 1, "b": 2}


async def test_snapshots_are_newest_first_and_limited(store: Store) -> None:
    h = Harness(store)
    for n in (2, 1, 3):
        h.send(1, "submitted", key=f"me/run1/{n}", target="a")
    assert [w.key for w in h.component.records(2)] == ["me/run1/3", "me/run1/2"]


async def test_the_store_round_trips_every_field_and_prunes_on_load(store: Store) -> None:
    table = JobRecordStore(store, keep_finished=2)
    full = Job(
        id="me/run1/9",
        engine="lmstudio",
        model="qwen",
        origin="me",
        created_at=109.0,
        state="failed",
        attempt=2,
        target="b",
        serving="b",
        started_at=110.0,
        completed_at=111.0,
        error="boom",
        seq=5,
        run_id="run1",
        path="/v1/chat/completions",
    )
    older = [
        Job(id=f"me/run1/{n}", engine="e", model="m", origin="me", created_at=100.0 + n)
        for n in range(1, 4)
    ]
    finished = [
        Job(
            id=job.id,
            engine="e",
            model="m",
            origin="me",
            created_at=job.created_at,
            state="completed",
        )
        for job in older[1:]
    ]
    await table.save([(full, 1.0), (older[0], 1.0), *((job, 1.0) for job in finished)])
    loaded = await table.load()
    assert loaded == [full, finished[1], older[0]], "the oldest finished one is pruned"


async def test_a_component_restart_within_the_same_broker_keeps_live_jobs(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="a")
    async with running(h.component):
        h.send(2, "started", node="a")
    async with running(h.component):  # the supervisor ran it again after a crash
        pass
    assert h.job().state == "running"
    h.send(3, "completed")
    assert h.job().state == "completed"


async def test_clearing_forgets_finished_jobs_in_memory_and_store_and_keeps_unfinished(
    store: Store,
) -> None:
    h = Harness(store)
    async with running(h.component):
        h.send(1, "submitted", key="me/run1/1", target="a")
        h.send(2, "completed", key="me/run1/1")
        h.send(1, "submitted", key="me/run1/2", target="a")  # stays running
        h.send(2, "started", key="me/run1/2", node="a")
        h.send(1, "submitted", key="me/run1/3", target="b")
        h.send(2, "errored", key="me/run1/3", error="boom")
        await h.component.write_pending()
        h.send(1, "submitted", key="me/run1/4", target="a")
        await h.component.write_pending()  # stored while in flight...
        h.send(2, "errored", key="me/run1/4", error="left", cancelled=True)  # ...then finished
        pushed = len(h.subscriber.events)

        assert await h.component.clear_finished() == 3

        removed = h.subscriber.events[pushed:]
        assert [(_tag(event), event.key) for event in removed] == [
            ("remove", "me/run1/1"),
            ("remove", "me/run1/3"),
            ("remove", "me/run1/4"),
        ]
        assert [event.seq for event in removed] == [pushed + 1, pushed + 2, pushed + 3]
        assert h.listed() == ["me/run1/2"]
        assert sorted(await rows(store)) == ["me/run1/2"], "deleted before the answer"
        h.send(3, "completed", key="me/run1/3")
        assert "me/run1/3" not in h.listed(), "a late report cannot bring a cleared job back"
        h.send(3, "completed", key="me/run1/2")
        assert await h.component.clear_finished() == 1
        assert await h.component.clear_finished() == 0
    assert await rows(store) == {}


async def test_clearing_before_the_stored_jobs_are_loaded_is_refused(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", target="a")
    h.send(2, "completed")
    with pytest.raises(errors.Unavailable, match="still loading"):
        await h.component.clear_finished()
    assert h.listed() == [KEY]


def _tag(event: object) -> str:
    """A tagged event's wire tag (its ``event`` member)."""
    return str(type(event).__struct_config__.tag)  # type: ignore[attr-defined]


async def test_an_idle_component_sleeps_on_no_timer_until_there_is_work(store: Store) -> None:
    h = Harness(store)
    async with running(h.component):
        await asyncio.sleep(0.1)  # ten write intervals' worth of the brief clock
        assert h.clock.sleeps == []  # nothing to write, no gap to watch: no timer at all
        h.send(1, "submitted", target="a")

        async def written() -> bool:
            return KEY in await rows(store)

        await eventually(written)
        assert h.clock.sleeps  # paced again while there was work
        await eventually(lambda: not h.component._dirty)
        count = len(h.clock.sleeps)
        await asyncio.sleep(0.1)
        assert len(h.clock.sleeps) <= count + 1  # back to waiting after the write
