"""The records the crash-cycle writer commits, each a pure function of its id, and the checks
run on a store reopened after a ``kill -9``.

Because every row's content follows from its key (and, for jobs, its ``seq``), a reopened store
can be checked row by row: a torn or mixed-up row differs from what its key says it must be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from backend.components.discovery.manual import manual_id
from backend.components.jobs.state import Job, JobState
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.nodes import ManualNode

SETTINGS_FILE = "settings.json"
DATABASE_FILE = "pair.db"
# The writer keeps every finished job so that nothing it committed is pruned by the loader.
KEEP_FINISHED = 10**9
LAST_SEQ = 3
_BASE_TIME = 1_700_000_000.0


def job_key(cycle: int, number: int) -> JobKey:
    """The key of the writer's ``number``th job in ``cycle``."""
    return JobKey(f"c{cycle:05d}-j{number:06d}")


def expected_job(key: str, seq: int) -> Job:
    """The job ``key`` after its ``seq``th event: submitted, running, then finished."""
    number = int(key.rpartition("-j")[2])
    created = _BASE_TIME + int(key[1:6]) * 10_000 + number / 1000
    state: JobState = "in_flight"
    if seq == 2:
        state = "running"
    elif seq == LAST_SEQ:
        state = "failed" if number % 5 == 0 else "completed"
    return Job(
        id=JobKey(key),
        engine=EngineName(("ollama", "lmstudio", "llamacpp")[number % 3]),
        model=f"model-{number % 7}:latest",
        origin=NodeId("node-durability"),
        created_at=created,
        state=state,
        attempt=number % 2,
        target=NodeId(f"node-{number % 4}"),
        serving=NodeId(f"node-{number % 4}") if seq >= 2 else None,
        started_at=created + 0.5 if seq >= 2 else None,
        completed_at=created + 1.5 if seq == LAST_SEQ else None,
        error=f"engine said no ({'é' * (number % 9)})" if state == "failed" else None,
        seq=seq,
        run_id=f"run-{key[:6]}",
        path=("/api/chat", "/api/generate", "/v1/chat/completions")[number % 3],
    )


def manual_node_for(cycle: int, number: int) -> ManualNode:
    """The writer's ``number``th manual node of ``cycle`` (ids never repeat)."""
    address = f"host-c{cycle}-n{number}.lan"
    port = 1 + (number * 7919) % 65535
    return ManualNode(
        id=manual_id(address, port),
        address=address,
        port=port,
        name=None if number % 4 == 0 else f"node {number} ✓",
        added_at=_BASE_TIME + cycle * 10_000 + number / 1000,
        state="probing",
    )


def settings_values(number: int) -> dict[str, object]:
    """The ``number``th settings update: two keys that must always agree with each other."""
    return {"node_name": f"durability-{number}", "llamacpp_context": 256 + number}


def settings_number(values: dict[str, object]) -> int | None:
    """Which update ``values`` (as loaded) came from; None if the two keys disagree."""
    name, context = values.get("node_name"), values.get("llamacpp_context")
    if not isinstance(name, str) or not name.startswith("durability-"):
        return None
    number = int(name.removeprefix("durability-"))
    return number if context == 256 + number else None


@dataclass
class Acknowledged:
    """What the writers of one data dir said they had committed (a line printed after each
    commit returned), and the operations a kill may have cut, which may or may not have landed.

    ``nodes_uncertain`` and ``settings_uncertain`` outlive the run that was killed: a later run
    does not know whether its predecessor's last write landed.
    """

    jobs: dict[str, int] = field(default_factory=dict)  # key: highest acknowledged seq
    nodes: dict[str, ManualNode] = field(default_factory=dict)
    nodes_uncertain: dict[str, ManualNode] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    setting: int | None = None
    settings_uncertain: set[int] = field(default_factory=set)
    records: int = 0

    def next_setting(self) -> int:
        """The first settings update number a new writer may use."""
        return max([self.setting or 0, *self.settings_uncertain]) + 1

    def read(self, lines: list[str], cycle: int) -> None:
        """Take the lines of one writer run."""
        for line in lines:
            kind, _, rest = line.partition(" ")
            if kind == "J":
                key, seq = rest.split()
                self.jobs[key] = max(self.jobs.get(key, 0), int(seq))
                self.records += 1
            elif kind.startswith("M"):
                self._take_node(kind, rest, cycle)
            elif kind == "S?":
                self.settings_uncertain.add(int(rest))
            elif kind == "S":
                self.setting = int(rest)
                self.settings_uncertain = {n for n in self.settings_uncertain if n > self.setting}
                self.records += 1

    def _take_node(self, kind: str, rest: str, cycle: int) -> None:
        if kind == "M?+":
            node = manual_node_for(cycle, int(rest))
            self.nodes_uncertain[node.id] = node
        elif kind == "M+":
            node = manual_node_for(cycle, int(rest))
            self.nodes[node.id] = node
            self.nodes_uncertain.pop(node.id, None)
            self.records += 1
        elif kind == "M?-":
            self.nodes_uncertain[rest] = self.nodes[rest]
        elif kind == "M-":
            self.nodes.pop(rest, None)
            self.nodes_uncertain.pop(rest, None)
            self.removed.add(rest)
            self.records += 1


def read_lines(path: Path) -> list[str]:
    """Complete lines of a writer's output file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return text.split("\n")[:-1]  # after the last newline: nothing, or a line the kill cut


@dataclass
class Damage:
    """What a reopened store got wrong."""

    lost: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.lost or self.torn)


def check_jobs(acked: Acknowledged, loaded: list[Job], damage: Damage) -> None:
    """Every acknowledged job is there at its acknowledged ``seq`` or later; every row is whole."""
    by_key = {job.id: job for job in loaded}
    for key, seq in acked.jobs.items():
        job = by_key.get(JobKey(key))
        if job is None or job.seq < seq:
            damage.lost.append(f"job {key} seq {seq}: found {job}")
    for job in loaded:
        if not 1 <= job.seq <= LAST_SEQ or job != expected_job(job.id, job.seq):
            damage.torn.append(f"job {job}")


def check_nodes(acked: Acknowledged, loaded: list[ManualNode], damage: Damage) -> None:
    """Acknowledged additions are there, removals stay removed, every row is whole."""
    by_id = {node.id: node for node in loaded}
    for node_id in acked.nodes.keys() - by_id.keys() - acked.nodes_uncertain.keys():
        damage.lost.append(f"manual node {node_id}")
    for node_id in (acked.removed & by_id.keys()) - acked.nodes_uncertain.keys():
        damage.lost.append(f"removal of manual node {node_id}")
    for node_id, node in by_id.items():
        expected = acked.nodes.get(node_id) or acked.nodes_uncertain.get(node_id)
        if expected is None and node_id not in acked.removed:
            damage.torn.append(f"manual node {node_id} was never written")
        elif expected is not None and node != expected:
            damage.torn.append(f"manual node {node} != {expected}")


def check_settings(acked: Acknowledged, values: dict[str, object], damage: Damage) -> None:
    """Both keys come from one update: the last acknowledged one or one a kill cut."""
    name = values.get("node_name")
    number = settings_number(values)
    if isinstance(name, str) and name.startswith("durability-") and number is None:
        damage.torn.append(f"settings {json.dumps(values, default=str)[:200]}")
        return
    allowed: set[int | None] = set(acked.settings_uncertain)
    allowed.add(acked.setting)  # None (the defaults) only while nothing was acknowledged
    if number not in allowed:
        damage.lost.append(f"settings update {acked.setting} (found {number})")
