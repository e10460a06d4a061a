"""Other members' jobs in the jobs component: ``mirror`` takes only a member's own jobs
(and never an older record over a newer one), a complete snapshot fails what the member no
longer knows, ``mirror_removed`` drops only that member's jobs, a relay copy (``<key>@<n>``,
served here for a member) is one row with the member's own record once that is known, and
mirrored jobs are not this node's load, are not failed when the proxy exits and survive a
reload without being marked interrupted."""

from __future__ import annotations

from typing import Any, cast

import msgspec

from backend.components.jobs.component import MAX_FIELD_CHARS, JobsComponent, relay_base
from backend.components.jobs.state import INTERRUPTED
from backend.components.jobs.store import JobRecordStore
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind, JobRecord, JobsEvent, JobState
from tests.fakes import FakeClock
from tests.unit.components.jobs_rig import Subscriber, running

ME = NodeId("me")
PEER = NodeId("peer")
OTHER = NodeId("other")
OLLAMA = EngineName("ollama")


class Harness:
    """The jobs component of node ``me`` on a real store, with a subscriber."""

    def __init__(self, store: Store) -> None:
        self.clock = FakeClock(1_000.0, on_sleep="brief")  # time moves only when set
        self.events: NumberedStream[JobsEvent] = NumberedStream(methods.JOBS_EVENT, ClientHub())
        self.subscriber = Subscriber()
        self.events.subscribe(cast(RpcPeer, self.subscriber))
        self.component = JobsComponent(
            store=JobRecordStore(store, keep_finished=1000),
            clock=self.clock,
            node_id=ME,
            events=self.events,
        )

    def send(self, seq: int, kind: JobEventKind, *, key: str, **fields: Any) -> None:
        """A report of one of this node's own jobs (origin ``me``)."""
        self.component.on_job_event(
            job_report(seq, kind, key=key, origin=ME, created_at=101.0, **fields)
        )

    def job(self, key: str) -> JobRecord:
        return next(w for w in self.component.records(1000) if w.key == key)

    def listed(self) -> list[str]:
        return [w.key for w in self.component.records(1000)]


def job_report(seq: int, kind: JobEventKind, *, key: str, **fields: Any) -> dict[str, Any]:
    """A ``proxy/jobs`` report as the proxy worker sends it."""
    header: dict[str, Any] = {
        "engine": OLLAMA,
        "model": "llama3",
        "run_id": "run1",
        "at": 300.0 + seq,
    }
    header.update(fields)
    event = JobEvent(key=JobKey(key), seq=seq, kind=kind, attempt=1, **header)
    return cast(dict[str, Any], msgspec.to_builtins(event))


async def rows(store: Store) -> dict[str, tuple[Any, ...]]:
    found = await store.fetch_all("SELECT key, state, error, seq, serving FROM jobs")
    return {row[0]: row[1:] for row in found}


def theirs(
    n: int,
    state: JobState = "in_flight",
    seq: int = 1,
    *,
    member: NodeId = PEER,
    key: str | None = None,
    **fields: Any,
) -> JobRecord:
    """Job ``n`` as ``member`` itself records it (its key starts with its node id)."""
    values: dict[str, Any] = {
        "key": JobKey(key if key is not None else f"{member}/run9/{n}"),
        "engine": OLLAMA,
        "model": "llama3",
        "origin": member,
        "run_id": "run9",
        "state": state,
        "created_at": 200.0 + n,
        "seq": seq,
    }
    values.update(fields)
    return JobRecord(**values)


def relay_report(
    seq: int, kind: JobEventKind, key: str = f"{PEER}/run9/1@1", **fields: Any
) -> dict[str, Any]:
    """A ``proxy/jobs`` report of a request this node serves for PEER over the relay."""
    values: dict[str, Any] = {"origin": PEER, "run_id": "run9", "created_at": 201.0}
    values.update(fields)
    return job_report(seq, kind, key=key, **values)


def tag(event: JobsEvent) -> str:
    return str(type(event).__struct_config__.tag)


def pushed(h: Harness, since: int = 0) -> list[tuple[str, str]]:
    """The (tag, key) of every event pushed after the first ``since``."""
    return [(tag(event), event.key) for event in h.subscriber.events[since:]]


async def test_only_the_members_own_well_formed_jobs_are_taken(store: Store) -> None:
    h = Harness(store)
    long_text = "x" * (MAX_FIELD_CHARS + 1)
    offered = [
        theirs(1),
        theirs(2, origin=OTHER),  # claims another origin
        theirs(3, key=f"{OTHER}/run9/3"),  # another node's key
        theirs(4, key=f"{PEER}/run9/4@1"),  # a relay copy's key, even under the member's id
        theirs(5, key="x@1"),
        theirs(6, key="me/run1/6", origin=ME),  # this node's own job
        theirs(7, model=long_text),
        theirs(8, state="failed", error=long_text),
        theirs(9, path="/" + long_text),
        theirs(10, seq=-1),
        theirs(11, attempt=-1),
    ]
    assert h.component.mirror(PEER, offered, complete=False) == 1
    assert h.listed() == [f"{PEER}/run9/1"]
    assert pushed(h) == [("upsert", f"{PEER}/run9/1")]
    assert h.job(f"{PEER}/run9/1") == theirs(1)
    fits = theirs(12, model="y" * MAX_FIELD_CHARS)
    assert h.component.mirror(PEER, [fits], complete=False) == 1, "the limit itself is allowed"


async def test_an_older_record_does_not_overwrite_a_newer_one(store: Store) -> None:
    h = Harness(store)
    running_job = theirs(1, "running", 3, target="gpu", serving="gpu", started_at=303.0)
    assert h.component.mirror(PEER, [running_job], complete=False) == 1
    assert h.component.mirror(PEER, [theirs(1, "in_flight", 2)], complete=False) == 0
    assert h.job(f"{PEER}/run9/1") == running_job
    assert h.component.mirror(PEER, [running_job], complete=True) == 0, "the same: no change"
    assert len(h.subscriber.events) == 1
    done = theirs(1, "completed", 4, serving="gpu", completed_at=304.0)
    assert h.component.mirror(PEER, [done], complete=False) == 1
    assert h.job(f"{PEER}/run9/1") == done
    assert h.component.mirror(PEER, [running_job], complete=False) == 0
    assert h.job(f"{PEER}/run9/1").state == "completed"


async def test_a_complete_snapshot_fails_the_unfinished_jobs_it_no_longer_lists(
    store: Store,
) -> None:
    h = Harness(store)
    h.clock.now = 7_000.0
    h.component.mirror(
        PEER,
        [theirs(1), theirs(2, "running", 2), theirs(3, "completed", 2, completed_at=250.0)],
        complete=False,
    )
    h.component.mirror(OTHER, [theirs(1, member=OTHER)], complete=False)
    h.send(1, "submitted", key="me/run1/1", target="a")  # this node's own job
    h.component.on_job_event(relay_report(1, "submitted", key=f"{PEER}/run9/5@1"))
    before = len(h.subscriber.events)
    changed = h.component.mirror(PEER, [theirs(2, "running", 2)], complete=True)
    assert changed == 1
    lost = h.job(f"{PEER}/run9/1")
    assert (lost.state, lost.completed_at) == ("failed", 7_000.0)
    assert lost.error == f"lost: {PEER} no longer knows this job"
    assert pushed(h, before) == [("upsert", f"{PEER}/run9/1")]
    assert h.job(f"{PEER}/run9/2").state == "running"
    assert h.job(f"{PEER}/run9/3").state == "completed", "a finished job stays as it was"
    assert h.job(f"{OTHER}/run9/1").state == "in_flight", "another member's jobs are its own"
    assert h.job("me/run1/1").state == "in_flight"
    assert h.job(f"{PEER}/run9/5@1").state == "in_flight", "served here: not the member's record"
    assert h.component.mirror(PEER, [theirs(2, "running", 2)], complete=True) == 0


async def test_mirror_removed_drops_only_that_members_mirrored_job(store: Store) -> None:
    h = Harness(store)
    key = f"{PEER}/run9/1"
    h.component.mirror(PEER, [theirs(1, "completed", 2, completed_at=250.0)], complete=False)
    h.component.mirror(OTHER, [theirs(1, "completed", 2, member=OTHER)], complete=False)
    h.send(1, "submitted", key="me/run1/1", target="a")
    h.component.on_job_event(relay_report(1, "submitted", key=f"{PEER}/run9/5@1"))
    before = len(h.subscriber.events)
    h.component.mirror_removed(OTHER, JobKey(key))  # not OTHER's
    h.component.mirror_removed(PEER, JobKey("me/run1/1"))  # this node's own
    h.component.mirror_removed(PEER, JobKey(f"{PEER}/run9/5@1"))  # served here
    h.component.mirror_removed(PEER, JobKey(f"{OTHER}/run9/1"))  # OTHER's, named by PEER
    h.component.mirror_removed(PEER, JobKey(f"{PEER}/run9/404"))  # unknown
    assert len(h.subscriber.events) == before
    assert sorted(h.listed()) == sorted([key, f"{OTHER}/run9/1", "me/run1/1", f"{PEER}/run9/5@1"])
    await h.component.write_pending()
    assert key in await rows(store)
    h.component.mirror_removed(PEER, JobKey(key))
    assert pushed(h, before) == [("remove", key)]
    assert key not in h.listed()
    h.component.mirror(PEER, [theirs(1, "completed", 3)], complete=False)
    assert key not in h.listed(), "a late record cannot bring a removed job back"
    await h.component.write_pending()
    assert sorted(await rows(store)) == sorted([f"{OTHER}/run9/1", "me/run1/1", f"{PEER}/run9/5@1"])


async def test_a_relay_copy_is_one_row_with_the_members_own_record(store: Store) -> None:
    h = Harness(store)
    key, relay = f"{PEER}/run9/1", f"{PEER}/run9/1@1"
    assert relay_base(relay) == key and relay_base(key) is None
    h.component.on_job_event(relay_report(1, "submitted", target="me"))
    h.component.on_job_event(relay_report(2, "started", node="me"))
    assert h.listed() == [relay]
    assert pushed(h) == [("upsert", relay), ("upsert", relay)]

    before = len(h.subscriber.events)
    record = theirs(1, "running", 3, target="me", serving="me", started_at=302.0)
    h.component.mirror(PEER, [record], complete=False)
    assert pushed(h, before) == [("upsert", key), ("remove", relay)]
    assert [w.key for w in h.component.records(10)] == [key], "one row"
    assert h.component.records(10, origin=PEER) == [record]

    before = len(h.subscriber.events)
    h.component.on_job_event(relay_report(3, "completed"))  # this node's copy still changes
    assert pushed(h, before) == [], "a folded copy is not pushed"
    assert h.listed() == [key]
    h.component.mirror(PEER, [theirs(1, "completed", 4, completed_at=304.0)], complete=False)
    assert pushed(h, before) == [("upsert", key)]

    before = len(h.subscriber.events)
    h.component.mirror_removed(PEER, JobKey(key))
    assert pushed(h, before) == [("remove", key), ("upsert", relay)]
    assert h.listed() == [relay]
    assert h.job(relay).state == "completed"


async def test_pending_by_node_counts_no_mirrored_job(store: Store) -> None:
    h = Harness(store)
    h.component.mirror(
        PEER,
        [theirs(1, target="gpu"), theirs(2, "running", 2, target="gpu", serving="gpu")],
        complete=False,
    )
    assert h.component.pending_by_node() == {}
    h.send(1, "submitted", key="me/run1/1", target="gpu")
    h.component.on_job_event(relay_report(1, "submitted", target="me"))
    h.component.on_job_event(relay_report(2, "started", node="me"))
    assert h.component.pending_by_node() == {"gpu": 1, "me": 1}, "own and served jobs count"


async def test_the_proxy_exiting_leaves_mirrored_jobs_alone(store: Store) -> None:
    h = Harness(store)
    h.component.mirror(PEER, [theirs(1), theirs(2, "running", 2)], complete=False)
    h.send(1, "submitted", key="me/run1/1", target="a")
    h.component.on_job_event(relay_report(1, "submitted", key=f"{PEER}/run9/5@1", target="me"))
    before = len(h.subscriber.events)
    h.component.fail_unfinished("proxy exited")
    assert sorted(pushed(h, before)) == [("upsert", "me/run1/1"), ("upsert", f"{PEER}/run9/5@1")]
    assert h.job(f"{PEER}/run9/1").state == "in_flight"
    assert h.job(f"{PEER}/run9/2").state == "running"
    assert (h.job("me/run1/1").state, h.job("me/run1/1").error) == ("failed", "proxy exited")
    relay = h.job(f"{PEER}/run9/5@1")
    assert (relay.state, relay.error) == ("failed", "proxy exited"), "served here: it died here"


async def test_records_filter_by_origin_and_limits(store: Store) -> None:
    h = Harness(store)
    h.send(1, "submitted", key="me/run1/1", target="a")  # created at 101
    h.component.mirror(PEER, [theirs(1), theirs(2), theirs(3)], complete=False)
    h.component.mirror(OTHER, [theirs(4, member=OTHER)], complete=False)
    assert [w.key for w in h.component.records(10, origin=PEER)] == [
        f"{PEER}/run9/3",
        f"{PEER}/run9/2",
        f"{PEER}/run9/1",
    ]
    assert [w.key for w in h.component.records(2, origin=PEER)] == [
        f"{PEER}/run9/3",
        f"{PEER}/run9/2",
    ]
    assert [w.key for w in h.component.records(10, origin=OTHER)] == [f"{OTHER}/run9/4"]
    assert [w.key for w in h.component.records(10, origin=ME)] == ["me/run1/1"]
    assert h.component.records(10, origin=NodeId("nobody")) == []
    assert len(h.component.records(10)) == 5


async def test_mirrored_jobs_survive_a_reload_without_being_interrupted(store: Store) -> None:
    before = Harness(store)
    running_job = theirs(2, "running", 2, target="gpu", serving="gpu", started_at=302.0)
    before.component.mirror(PEER, [theirs(1), running_job], complete=False)
    before.send(1, "submitted", key="me/run1/1", target="a")
    before.component.on_job_event(relay_report(1, "submitted", key=f"{PEER}/run9/3@1"))
    await before.component.write_pending()

    after = Harness(store)
    after.clock.now = 5_000.0
    async with running(after.component):
        pass
    assert after.job(f"{PEER}/run9/1") == theirs(1)
    assert after.job(f"{PEER}/run9/2") == running_job
    assert (after.job("me/run1/1").state, after.job("me/run1/1").error) == ("failed", INTERRUPTED)
    relay = after.job(f"{PEER}/run9/3@1")
    assert (relay.state, relay.error) == ("failed", INTERRUPTED), "served here: it died here"
    stored = await rows(store)
    assert stored[f"{PEER}/run9/1"][:2] == ("in_flight", None)
    assert stored[f"{PEER}/run9/2"][:2] == ("running", None)
    # Still the member's to finish: its next complete snapshot decides.
    assert after.component.mirror(PEER, [running_job], complete=True) == 1
    assert after.job(f"{PEER}/run9/1").state == "failed"
    assert after.job(f"{PEER}/run9/2").state == "running"


async def test_a_member_removing_a_job_still_unfinished_here_leaves_a_consistent_state(
    store: Store,
) -> None:
    """A member may drop a job this node still holds unfinished (its last upsert was dropped
    here, e.g. as too long): the load, the proxy-exit failing and the next complete snapshot
    must still work."""
    h = Harness(store)
    h.component.mirror(PEER, [theirs(1, target="gpu")], complete=False)
    h.component.mirror_removed(PEER, JobKey(f"{PEER}/run9/1"))
    assert f"{PEER}/run9/1" not in h.listed()
    assert h.component.pending_by_node() == {}
    h.component.fail_unfinished("proxy exited")
    assert h.component.mirror(PEER, [], complete=True) == 0
