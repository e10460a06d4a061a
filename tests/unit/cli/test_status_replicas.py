"""``pair status``'s replicas block: the planner's mode, whether it runs, its limits and one
line per replica; nothing at all from a broker that does not report replicas."""

from __future__ import annotations

import msgspec

from backend.cli.client_commands import format_status
from backend.cli.replicas_format import replica_line, replicas_lines
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.replicas import ReplicaInfo, ReplicasStatus
from tests.unit.cli.scripted import broker_status

READY = ReplicaInfo(
    model="qwen2.5:7b",
    node_id=NodeId("n-laptop"),
    node_name="laptop",
    engine=EngineName("ollama"),
    name="qwen2.5:7b",
    state="ready",
    reason="qwen2.5:7b waited 18 s on gpu-box; loading it on laptop",
    since=1000.0,
)
FAILED = msgspec.structs.replace(
    READY,
    node_name="desk",
    engine=EngineName("llamacpp"),
    name="qwen2.5-7b-instruct-q4_k_m.gguf",
    state="failed",
    since=1170.0,
    error="not enough memory",
)
STATUS = ReplicasStatus(mode="auto", active=True, target_wait_s=10.0, ttl_s=300.0, max_per_model=3)


def test_the_block_says_mode_limits_and_each_replica() -> None:
    lines = replicas_lines(msgspec.structs.replace(STATUS, replicas=[READY, FAILED]), now=1200.0)
    assert lines[0] == ("replicas    auto (on while the cluster has more than one member): active")
    assert "over 10 s" in lines[1] and "after 5 min unused" in lines[1]
    assert "at most 3 computers per model" in lines[1]
    assert lines[2] == (
        "  qwen2.5:7b on laptop (ollama): ready for 3 min:"
        " qwen2.5:7b waited 18 s on gpu-box; loading it on laptop"
    )
    assert lines[3].startswith(
        "  qwen2.5:7b on desk (llamacpp, as qwen2.5-7b-instruct-q4_k_m.gguf): failed for 30 s:"
    )
    assert lines[3].endswith("; not enough memory")


def test_an_idle_or_inactive_planner_says_so() -> None:
    off = msgspec.structs.replace(STATUS, mode="off", active=False, ttl_s=7200.0)
    lines = replicas_lines(off, now=0.0)
    assert lines[0] == "replicas    off: not active"
    assert "after 2 h unused" in lines[1]
    assert lines[2].strip() == "no replicas loaded by PAIR"


def test_durations_read_as_people_say_them() -> None:
    def ago(seconds: float) -> str:
        return replica_line(READY, now=READY.since + seconds).split(": ")[1]

    assert [ago(s) for s in (0, 119, 120, 7199, 7200, 9000, 3 * 86400)] == [
        "ready for 0 s",
        "ready for 119 s",
        "ready for 2 min",
        "ready for 119 min",
        "ready for 2 h",
        "ready for 2 h 30 min",
        "ready for 3 d",
    ]


def test_pair_status_prints_the_block_only_when_the_broker_reports_it() -> None:
    old = format_status(broker_status())
    assert "replicas" not in old
    text = format_status(msgspec.structs.replace(broker_status(), replicas=STATUS))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("placement"))
    assert lines[at + 1].startswith("replicas    auto")
    assert lines[at + 3] == "            no replicas loaded by PAIR"
