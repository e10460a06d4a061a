"""``pair jobs`` output: the table's rows, ``--follow`` printing only events after the snapshot
it was given, whatever order they arrive in, and the jobs shown: those this node took part in,
or with ``--cluster`` every job the broker holds."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from backend.cli import exit_codes
from backend.cli.jobs_command import (
    HEADER,
    MAX_LIMIT,
    JobsFollower,
    JobsView,
    format_job,
    format_jobs,
    show_jobs,
)
from backend.cli.main import build_parser
from backend.protocol import errors, methods
from backend.protocol.types.base import JobKey, NodeId
from backend.protocol.types.jobs import (
    JobRecord,
    JobRemoved,
    JobsEvent,
    JobsSnapshot,
    JobUpserted,
)
from tests.unit.cli.scripted import ALICE, BOB, CAROL, ScriptedBroker

NOW = 10_000.0
ORIGIN = "0f3c2a9e-1111-4222-8333-944455556666"
PEER = "7b1d00c4-aaaa-4bbb-8ccc-9ddddeeeefff"


def _record(**fields: Any) -> JobRecord:
    base: dict[str, Any] = {
        "key": f"{ORIGIN}/run1/1",
        "engine": "ollama",
        "model": "llama3.2:3b",
        "origin": ORIGIN,
        "run_id": "run1",
        "state": "completed",
        "created_at": NOW - 125.0,
        "seq": 3,
        "target": PEER,
        "serving": PEER,
        "started_at": NOW - 124.0,
        "completed_at": NOW - 122.6,
    }
    base.update(fields)
    return JobRecord(**base)


def test_a_row_shows_state_model_engine_short_route_age_duration_and_error() -> None:
    row = format_job(_record(), NOW)
    assert row.split() == [
        *("Completed", "llama3.2:3b", "ollama", "-", "0f3c2a9e→7b1d00c4", "2m", "2.4s")
    ]
    assert row.index("ollama") == HEADER.index("ENGINE")
    assert row.index("0f3c2a9e") == HEADER.index("ORIGIN→NODE")


@pytest.mark.parametrize(
    ("fields", "state", "route", "age", "duration"),
    [
        (
            {
                "state": "in_flight",
                "serving": None,
                "target": None,
                "completed_at": None,
                "created_at": NOW - 4.0,
            },
            "In flight",
            "0f3c2a9e→-",
            "4s",
            "4.0s",
        ),
        (
            {"state": "running", "completed_at": None, "created_at": NOW - 3700},
            "Running",
            "0f3c2a9e→7b1d00c4",
            "1h",
            "1h01m",
        ),
        (
            {
                "state": "cancelled",
                "serving": None,
                "created_at": NOW - 90_000,
                "completed_at": NOW - 89_990,
            },
            "Cancelled",
            "0f3c2a9e→7b1d00c4",
            "1d",
            "10.0s",
        ),
        (
            {"state": "failed", "created_at": NOW - 200, "completed_at": NOW - 10},
            "Failed",
            "0f3c2a9e→7b1d00c4",
            "3m",
            "3m10s",
        ),
    ],
)
def test_rows_in_every_state(
    fields: dict[str, Any], state: str, route: str, age: str, duration: str
) -> None:
    columns = format_job(_record(**fields), NOW).split()
    assert columns[: len(state.split())] == state.split()
    assert columns[-3:] == [route, age, duration]


def test_long_models_are_cut_and_errors_stay_on_one_line() -> None:
    row = format_job(
        _record(
            model="hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M",
            state="failed",
            error="engine said:\n  out of memory",
        ),
        NOW,
    )
    assert "\n" not in row
    assert row.endswith("engine said: out of memory")
    assert "hf.co/bartowski/Llama-3.2-…" in row
    assert row.index("ollama") == HEADER.index("ENGINE")


def test_the_client_column_names_the_key_or_loopback_on_one_word() -> None:
    row = format_job(_record(client="guest laptop", client_address="192.168.1.9"), NOW)
    assert row.split()[3] == "guest_laptop"
    assert row.index("guest_laptop") == HEADER.index("CLIENT")
    assert format_job(_record(client="loopback"), NOW).split()[3] == "loopback"


def test_an_empty_list_says_so() -> None:
    assert format_jobs([], NOW) == HEADER + "\nno jobs yet"


def test_follow_prints_the_snapshot_oldest_first_then_only_later_events() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, now=lambda: NOW)
    newer = _record(key="k2", model="qwen", created_at=NOW - 5)
    older = _record(key="k1", model="llama", created_at=NOW - 50)

    def push(seq: int, record: JobRecord | None) -> None:
        params: JobsEvent = (
            JobRemoved(seq=seq, key=JobKey("k"))
            if record is None
            else JobUpserted(seq=seq, key=JobKey("k"), job=record)
        )
        follower.on_push(methods.JOBS_EVENT.name, msgspec.to_builtins(params))

    push(7, _record(key="k3", model="early"))  # came before the snapshot's answer
    push(6, _record(key="k2", model="stale"))  # already in the snapshot
    follower.on_push(methods.ERRORS_UPDATE.name, [])
    follower.start(JobsSnapshot(seq=6, jobs=[newer, older]))
    push(8, None)
    push(9, _record(key="k4", model="late"))
    table, *events = lines
    assert [line.split()[1] for line in table.splitlines()[1:]] == ["llama", "qwen"]
    assert [line.split()[3] for line in events] == ["early", "late"]  # time, id, state, model


def test_the_command_line() -> None:
    args = build_parser().parse_args(["jobs", "--limit", "5", "--follow", "--json", "--cluster"])
    assert (args.command, args.limit, args.follow, args.json) == ("jobs", 5, True, True)
    assert args.cluster
    assert build_parser().parse_args(["jobs"]).limit == 50
    assert not build_parser().parse_args(["jobs"]).cluster
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "--limit", "0"])


# -- this node's jobs, or the cluster's ----------------------------------------------------------

DAVE = NodeId("d4e5f6a7-3333-4444-8555-966677778888")  # neither this node nor a member


def _job(key: str, origin: NodeId, target: NodeId | None, serving: NodeId | None) -> JobRecord:
    return _record(
        key=key, origin=origin, target=target, serving=serving, model=key, created_at=NOW - 10
    )


SENT = _job("sent", ALICE, BOB, BOB)  # received here, served by bob
SERVED = _job("served", BOB, ALICE, ALICE)  # bob's request, served here
TRIED = _job("tried", BOB, ALICE, None)  # sent here, not started yet
RELAYED = _job("relayed", BOB, CAROL, ALICE)  # only its engine ran here
ELSEWHERE = _job("elsewhere", BOB, CAROL, CAROL)  # mirrored from bob: this node had no part
FOREIGN = _job("foreign", DAVE, None, None)


def test_this_nodes_jobs_are_those_it_received_was_sent_or_served() -> None:
    view = JobsView(only=ALICE)
    shown = [view.shows(w) for w in (SENT, SERVED, TRIED, RELAYED, ELSEWHERE, FOREIGN)]
    assert shown == [True, True, True, True, False, False]
    assert all(JobsView().shows(w) for w in (SENT, ELSEWHERE, FOREIGN))


def test_filtering_asks_for_every_job_then_keeps_the_newest_shown_ones() -> None:
    snapshot = JobsSnapshot(seq=4, jobs=[ELSEWHERE, SENT, FOREIGN, SERVED, TRIED])
    assert JobsView(only=ALICE).query(5).limit == MAX_LIMIT
    assert JobsView().query(5).limit == 5
    selected = JobsView(only=ALICE).select(snapshot, 2)
    assert (selected.seq, selected.jobs) == (4, [SENT, SERVED])
    assert JobsView().select(snapshot, 2).jobs == [ELSEWHERE, SENT]


def test_the_route_names_known_nodes_and_shortens_the_others() -> None:
    names = {ALICE: "alice", BOB: "bob", CAROL: "carol-workstation-2"}
    assert "alice→bob" in format_job(SENT, NOW, names).split()
    assert "bob→carol-works…" in format_job(ELSEWHERE, NOW, names).split()
    assert "d4e5f6a7→-" in format_job(FOREIGN, NOW, names).split()
    assert "0f3c2a9e→7b1d00c4" in format_job(SENT, NOW).split()
    spaced = format_job(SENT, NOW, {ALICE: "Alice's  Mac", BOB: "bob"})
    assert "Alice's Mac→bob" in spaced
    assert spaced.index("Alice") == HEADER.index("ORIGIN→NODE")
    assert spaced.index("10s") == HEADER.index("AGE")


def _broker_with(*records: JobRecord) -> ScriptedBroker:
    broker = ScriptedBroker()
    snapshot = JobsSnapshot(seq=9, jobs=list(records))
    broker.answer(methods.JOBS_GET_INITIAL.name, snapshot)
    return broker


async def test_pair_jobs_shows_only_this_nodes_jobs_with_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = _broker_with(ELSEWHERE, SENT, FOREIGN, SERVED, TRIED)
    assert await show_jobs(broker.peer, limit=2, as_json=False, cluster=False) == exit_codes.OK
    assert broker.calls[-1] == (methods.JOBS_GET_INITIAL.name, {"limit": MAX_LIMIT})
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[1:5:3] for row in rows] == [["sent", "alice→bob"], ["served", "bob→alice"]]


async def test_pair_jobs_cluster_shows_every_job(capsys: pytest.CaptureFixture[str]) -> None:
    broker = _broker_with(ELSEWHERE, SENT, FOREIGN)
    assert await show_jobs(broker.peer, limit=7, as_json=False, cluster=True) == exit_codes.OK
    assert broker.calls[-1] == (methods.JOBS_GET_INITIAL.name, {"limit": 7})
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[1] for row in rows] == ["elsewhere", "sent", "foreign"]


async def test_pair_jobs_json_is_the_filtered_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    broker = _broker_with(ELSEWHERE, SENT, FOREIGN, SERVED)
    assert await show_jobs(broker.peer, limit=50, as_json=True, cluster=False) == exit_codes.OK
    printed = msgspec.json.decode(capsys.readouterr().out, type=JobsSnapshot)
    assert printed == JobsSnapshot(seq=9, jobs=[SENT, SERVED])


async def test_without_cluster_status_the_ids_stand_in_for_member_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = _broker_with(SERVED)
    broker.answer(methods.CLUSTER_STATUS.name, errors.Unavailable("cluster is not running"))
    assert await show_jobs(broker.peer, limit=50, as_json=False, cluster=False) == exit_codes.OK
    assert "7b1d00c4→alice" in capsys.readouterr().out


def _pushed(follower: JobsFollower, event: JobsEvent) -> None:
    follower.on_push(methods.JOBS_EVENT.name, msgspec.to_builtins(event))


def _upsert(seq: int, record: JobRecord) -> JobUpserted:
    return JobUpserted(seq=seq, key=record.key, job=record)


WATCHED = frozenset({"tried", "served", "bob→alice", "bob→7b1d99f0"})


def test_follow_shows_this_nodes_jobs_and_keeps_showing_one_it_took_part_in() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, now=lambda: NOW)
    view = JobsView(only=ALICE, names={ALICE: "alice", BOB: "bob"})
    follower.start(JobsSnapshot(seq=1, jobs=[ELSEWHERE, SENT]), view, 50)
    failed_over = msgspec.structs.replace(TRIED, target=CAROL, serving=CAROL, attempt=2)
    for seq, record in enumerate([FOREIGN, TRIED, ELSEWHERE, failed_over, SERVED], 2):
        _pushed(follower, _upsert(seq, record))
    table, *events = lines
    assert [row.split()[1] for row in table.splitlines()[1:]] == ["sent"]
    assert [[word for word in row.split()[2:] if word in WATCHED] for row in events] == [
        ["tried", "bob→alice"],
        ["tried", "bob→7b1d99f0"],  # it failed over to carol: still a job this node was in
        ["served", "bob→alice"],
    ]


def test_follow_json_leaves_out_other_nodes_jobs_and_their_removals() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, as_json=True)
    _pushed(follower, _upsert(5, SERVED))  # before the snapshot's answer
    _pushed(follower, _upsert(6, FOREIGN))
    snapshot = JobsSnapshot(seq=4, jobs=[SENT, ELSEWHERE])
    follower.start(snapshot, JobsView(only=ALICE), 50)
    later: list[JobsEvent] = [
        JobRemoved(seq=7, key=ELSEWHERE.key),
        JobRemoved(seq=8, key=SENT.key),
        JobRemoved(seq=9, key=SENT.key),  # gone already
        _upsert(10, ELSEWHERE),
    ]
    for event in later:
        _pushed(follower, event)
    first, *rest = lines
    shown = msgspec.json.decode(first, type=JobsSnapshot)
    assert shown == JobsSnapshot(seq=4, jobs=[SENT])
    decoded = [msgspec.json.decode(line, type=JobsEvent) for line in rest]
    assert [(event.seq, event.key) for event in decoded] == [(5, SERVED.key), (8, SENT.key)]


def test_follow_cluster_shows_everything() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, as_json=True)
    follower.start(JobsSnapshot(seq=0, jobs=[ELSEWHERE]), JobsView(), 50)
    _pushed(follower, _upsert(1, FOREIGN))
    _pushed(follower, JobRemoved(seq=2, key=ELSEWHERE.key))
    assert len(lines) == 3


def test_follow_prints_one_line_per_state_change_with_time_id_and_attempt() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, now=lambda: NOW)
    follower.start(JobsSnapshot(seq=0, jobs=[]))
    key = f"{ORIGIN}/a1b2c3d4/7"
    steps = [
        _record(key=key, state="in_flight", attempt=1, serving=None, completed_at=None),
        _record(key=key, state="in_flight", attempt=1, target=ORIGIN, completed_at=None),
        _record(key=key, state="running", attempt=1, completed_at=None),
        _record(key=key, state="in_flight", attempt=2, serving=None, completed_at=None),
        _record(key=key, state="failed", attempt=2, error="the engine answered 500"),
    ]
    for seq, record in enumerate(steps, 1):
        _pushed(follower, _upsert(seq, record))
    events = lines[1:]
    clock = time.strftime("%H:%M:%S", time.localtime(NOW))
    assert [line.split()[:2] for line in events] == [[clock, "a1b2c3d4/7"]] * 4
    assert ["attempt" in line for line in events] == [False, False, True, True]
    assert "In flight (attempt 2/5)" in events[2]
    assert "Failed (attempt 2/5)" in events[3] and events[3].endswith("the engine answered 500")


def test_durations_under_a_second_read_in_milliseconds() -> None:
    row = format_job(_record(created_at=NOW - 10.0, completed_at=NOW - 9.58), NOW)
    assert row.split()[-1] == "420ms"
