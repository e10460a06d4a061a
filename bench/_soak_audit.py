"""The soak's audit: resources sampled over time, the jobs each broker keeps, the logs.

Not a benchmark itself; ``bench/soak.py`` drives it. Resources are the RSS and open file
descriptors of each node's broker and proxy worker (whichever process holds the role when the
sample is taken: a worker killed by chaos is followed by its successor), sampled every few
seconds; a series is flat when the median of its last quarter is within the allowed growth of
the median of its first quarter (growth below an absolute floor never counts: a few file
descriptors or megabytes are noise, not a leak).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil

from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import JobsQuery
from bench._soak_cluster import Cluster, SoakNode, call

# The last line of a traceback a worker wrote to its stderr: ``[proxy] ImportError: ...``.
_WORKER_EXCEPTION: Final = re.compile(r"^\[[\w-]+\] [\w.]+(Error|Exception|Exit): ")
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
JOBS_LIMIT: Final = 1000
VIEWS_SETTLE_S: Final = 15.0  # the most ``jobs:get-initial`` answers with
# Below these, growth is noise: a worker's descriptors follow its kept-alive connections (clients,
# its engine, the other nodes' relays), which come and go with the traffic.
FLOORS: Final = {"rss": 8 * 1024 * 1024, "fds": 20}


@dataclass(frozen=True)
class Sample:
    """One process at one moment: monotonic time, PID, RSS in bytes, open descriptors."""

    at: float
    pid: int
    rss: int
    fds: int


@dataclass(frozen=True)
class Growth:
    """One series' first-quarter and last-quarter medians, and whether it grew too much."""

    role: str
    metric: str
    first: float
    last: float
    samples: int
    processes: int
    flagged: bool

    @property
    def percent(self) -> float:
        """Growth of the last quarter's median over the first's, in percent."""
        return (self.last - self.first) / self.first * 100 if self.first else 0.0


@dataclass
class Resources:
    """The sampled series, keyed by role (``a broker``, ``a worker``, ...)."""

    series: dict[str, list[Sample]] = field(default_factory=dict)
    began: float = 0.0
    ended: float = 0.0

    async def sample_forever(self, cluster: Cluster, interval: float) -> None:
        """Sample every node that is up, every ``interval`` seconds, until cancelled."""
        self.began = time.monotonic()
        while True:
            for node in cluster.nodes:
                await self._sample(cluster, node)
            self.ended = time.monotonic()
            await asyncio.sleep(interval)

    async def _sample(self, cluster: Cluster, node: SoakNode) -> None:
        if node.process is None or not node.up:
            return
        pids = {"broker": node.process.pid}
        with contextlib.suppress(Exception):  # a broker going down between two samples
            worker = await cluster.worker_pid(node)
            if worker is not None:
                pids["worker"] = worker
        for role, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                sample = Sample(time.monotonic(), pid, process.memory_info().rss, process.num_fds())
                self.series.setdefault(f"{node.name} {role}", []).append(sample)

    def growth(self, max_growth_percent: float) -> list[Growth]:
        """Per role and metric: first-quarter vs last-quarter medians, flagged above the bound."""
        quarter = (self.ended - self.began) / 4
        rows = []
        for role, samples in sorted(self.series.items()):
            first = [s for s in samples if s.at <= self.began + quarter]
            last = [s for s in samples if s.at >= self.ended - quarter]
            if not first or not last:
                continue
            processes = len({s.pid for s in samples})
            for metric in ("rss", "fds"):
                low = statistics.median(getattr(s, metric) for s in first)
                high = statistics.median(getattr(s, metric) for s in last)
                grew = high - low
                flagged = grew > FLOORS[metric] and grew > low * max_growth_percent / 100
                rows.append(Growth(role, metric, low, high, len(samples), processes, flagged))
        return rows


@dataclass(frozen=True)
class JobsAudit:
    """One broker's jobs after the soak: counts by state, the keys not terminal, and its view
    of each node's jobs (``origin`` = that node: key to state)."""

    node: str
    states: Counter[str]
    open_keys: list[str]
    listed: int
    views: dict[str, dict[str, tuple[str, float]]]
    horizon: float  # when its oldest kept job was created: its history starts there

    @property
    def passed(self) -> bool:
        """Every job it keeps is terminal."""
        return not self.open_keys


async def audit_jobs(cluster: Cluster, settle: float) -> list[JobsAudit]:
    """Each broker's jobs (its RPC), given ``settle`` seconds to finish the last ones.

    ``jobs:get-initial`` answers with the newest 1,000 jobs; the unfinished ones are never
    trimmed from ``pair.db``, so a job left unfinished earlier than those (or a copy this node
    kept of a job it served for another, which the RPC folds into the other's record) is read
    from there (read only) and reported unless the RPC shows it terminal.
    """
    began = time.monotonic()
    while True:
        audits = [await _audit_node(cluster, node) for node in cluster.nodes if node.up]
        waited = time.monotonic() - began
        settled = all(audit.passed for audit in audits) or waited > settle
        # The views of other nodes' jobs are mirrors that may lag: they get a while to agree.
        if settled and (not view_differences(audits) or waited > VIEWS_SETTLE_S):
            return audits
        await asyncio.sleep(1.0)


async def _audit_node(cluster: Cluster, node: SoakNode) -> JobsAudit:
    snapshot = await call(node, methods.JOBS_GET_INITIAL, JobsQuery(limit=JOBS_LIMIT))
    states: Counter[str] = Counter(job.state for job in snapshot.jobs)
    known = {job.key: job.state for job in snapshot.jobs}
    open_keys = [f"{key} {state}" for key, state in known.items() if state not in TERMINAL]
    for key, state in _open_in_store(node.data_dir / "pair.db"):
        if key not in known:  # when it is, the RPC is newer than the last write
            open_keys.append(f"{key} {state} (in pair.db only)")
    views: dict[str, dict[str, tuple[str, float]]] = {}
    for origin in cluster.nodes:
        query = JobsQuery(limit=JOBS_LIMIT, origin=NodeId(origin.node_id))
        answer = await call(node, methods.JOBS_GET_INITIAL, query)
        views[origin.name] = {job.key: (job.state, job.created_at) for job in answer.jobs}
    horizon = min((job.created_at for job in snapshot.jobs), default=0.0)
    return JobsAudit(node.name, states, open_keys, len(snapshot.jobs), views, horizon)


def view_differences(audits: list[JobsAudit]) -> list[str]:
    """Where a broker's view of another node's jobs differs from that node's own list.

    Each broker keeps a bounded history (of every node's jobs), so only the jobs created after
    both histories begin are compared.
    """
    by_node = {audit.node: audit for audit in audits}
    lines = []
    for origin, own in by_node.items():
        for audit in audits:
            if audit.node == origin:
                continue
            since = max(own.horizon, audit.horizon) + 1.0
            truth = {k: state for k, (state, at) in own.views[origin].items() if at > since}
            seen = {k: state for k, (state, at) in audit.views[origin].items() if at > since}
            missing = [key for key in truth if key not in seen]
            extra = [key for key in seen if key not in truth]
            differ = [k for k in truth if k in seen and seen[k] != truth[k]]
            if missing or extra or differ:
                lines.append(
                    f"{audit.node}'s view of {origin}'s {len(truth)} jobs (since both histories"
                    f" begin): {len(missing)} missing, {len(extra)} extra,"
                    f" {len(differ)} in another state (e.g. {(missing + extra + differ)[:3]})"
                )
    return lines


def _open_in_store(database: Path) -> list[tuple[str, str]]:
    terminal = ", ".join(f"'{state}'" for state in sorted(TERMINAL))
    query = f"SELECT key, state FROM jobs WHERE state NOT IN ({terminal})"
    with (
        contextlib.suppress(sqlite3.Error),
        contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db,
    ):
        return [(str(key), str(state)) for key, state in db.execute(query)]
    return []


@dataclass(frozen=True)
class LogFindings:
    """One node's log: records at error level or above, tracebacks, the commonest messages."""

    node: str
    errors: int
    tracebacks: int
    top: list[tuple[str, int]]


def scan_log(node: SoakNode) -> LogFindings:
    """Read ``node``'s JSON log lines (across its restarts)."""
    errors = tracebacks = 0
    messages: Counter[str] = Counter()
    with contextlib.suppress(OSError):
        for line in node.log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                tracebacks += line.startswith("Traceback")
                continue
            if not isinstance(record, dict):
                continue
            message = str(record.get("msg"))
            # A worker's stderr is forwarded line by line (a traceback too, at info level).
            tracebacks += "exc" in record or "Traceback (most recent call last)" in message
            if record.get("level") in ("error", "critical") or _WORKER_EXCEPTION.match(message):
                errors += 1
                messages[f"{record.get('logger')}: {message[:100]}"] += 1
    return LogFindings(node.name, errors, tracebacks, messages.most_common(5))


def megabytes(value: float) -> str:
    """Bytes in MiB, one decimal."""
    return f"{value / 1024 / 1024:.1f} MiB"
