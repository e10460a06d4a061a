"""``pair jobs`` output: the table's rows, and ``--follow`` printing only events after the
snapshot it was given, whatever order they arrive in."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from backend.cli.jobs_command import HEADER, JobsFollower, format_job, format_jobs
from backend.cli.main import build_parser
from backend.protocol import methods
from backend.protocol.types import (
    JobKey,
    Workload,
    WorkloadRemoved,
    WorkloadsEvent,
    WorkloadsSnapshot,
    WorkloadUpserted,
)

NOW = 10_000.0
ORIGIN = "0f3c2a9e-1111-4222-8333-944455556666"
PEER = "7b1d00c4-aaaa-4bbb-8ccc-9ddddeeeefff"


def _workload(**fields: Any) -> Workload:
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
    return Workload(**base)


def test_a_row_shows_state_model_engine_short_route_age_duration_and_error() -> None:
    row = format_job(_workload(), NOW)
    assert row.split() == ["Completed", "llama3.2:3b", "ollama", "0f3c2a9e→7b1d00c4", "2m", "2.4s"]
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
    columns = format_job(_workload(**fields), NOW).split()
    assert columns[: len(state.split())] == state.split()
    assert columns[-3:] == [route, age, duration]


def test_long_models_are_cut_and_errors_stay_on_one_line() -> None:
    row = format_job(
        _workload(
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


def test_an_empty_list_says_so() -> None:
    assert format_jobs([], NOW) == HEADER + "\nno jobs yet"


def test_follow_prints_the_snapshot_oldest_first_then_only_later_events() -> None:
    lines: list[str] = []
    follower = JobsFollower(lines.append, now=lambda: NOW)
    newer = _workload(key="k2", model="qwen", created_at=NOW - 5)
    older = _workload(key="k1", model="llama", created_at=NOW - 50)

    def push(seq: int, workload: Workload | None) -> None:
        params: WorkloadsEvent = (
            WorkloadRemoved(seq=seq, key=JobKey("k"))
            if workload is None
            else WorkloadUpserted(seq=seq, key=JobKey("k"), workload=workload)
        )
        follower.on_push(methods.WORKLOADS_EVENT.name, msgspec.to_builtins(params))

    push(7, _workload(key="k3", model="early"))  # came before the snapshot's answer
    push(6, _workload(key="k2", model="stale"))  # already in the snapshot
    follower.on_push(methods.ERRORS_UPDATE.name, [])
    follower.start(WorkloadsSnapshot(seq=6, workloads=[newer, older]))
    push(8, None)
    push(9, _workload(key="k4", model="late"))
    table, *events = lines
    assert [line.split()[1] for line in table.splitlines()[1:]] == ["llama", "qwen"]
    assert [line.split()[1] for line in events] == ["early", "late"]


def test_the_command_line() -> None:
    args = build_parser().parse_args(["jobs", "--limit", "5", "--follow", "--json"])
    assert (args.command, args.limit, args.follow, args.json) == ("jobs", 5, True, True)
    assert build_parser().parse_args(["jobs"]).limit == 50
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "--limit", "0"])
