"""``pair jobs``: the jobs (inference requests) this node took part in, newest first (``--cluster``:
every job of the cluster the broker holds); ``--follow`` then prints each change of a job's state
(or attempt) as a line until Ctrl+C: the time it was seen, the job's short id, the state with
"attempt N/M" once retried, and the row's other columns."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.cli.node_ref import fetch_directory
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import JobKey, NodeId
from backend.protocol.types.jobs import (
    MAX_ATTEMPTS,
    JobRecord,
    JobsEvent,
    JobsQuery,
    JobsSnapshot,
    JobState,
    JobUpserted,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
SHORT_ID = 8
MODEL_WIDTH = 28
NODE_WIDTH = 12  # a node's name in ORIGIN→NODE, cut to fit
ROUTE_WIDTH = 2 * NODE_WIDTH + 3
CLIENT_WIDTH = 14  # the LAN API key's name (or ``loopback``) that asked; --json has its address
SHORT_JOB = 14  # ``<run id>/<n>`` and a space
STATE_LABELS: dict[JobState, str] = {
    "in_flight": "In flight",
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
# A replica planner's jobs (no client asked them): what they did; their note says why.
REPLICA_ACTIONS = {"replica:load": "Load replica", "replica:unload": "Unload replica"}
HEADER = (
    f"{'STATE':<11}{'MODEL':<{MODEL_WIDTH}}{'ENGINE':<10}{'CLIENT':<{CLIENT_WIDTH}}"
    f"{'ORIGIN→NODE':<{ROUTE_WIDTH}}"
    f"{'AGE':<6}{'DURATION':<10}ERROR / NOTE"
)


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``jobs``."""
    jobs = commands.add_parser("jobs", help="list the jobs this node took part in")
    add_data_dir(jobs)
    jobs.add_argument("--json", action="store_true", help="print the raw snapshot (and events)")
    jobs.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"at most N jobs, newest first (1-{MAX_LIMIT}, default {DEFAULT_LIMIT})",
    )
    jobs.add_argument(
        "--follow", action="store_true", help="then print every change as a line until Ctrl+C"
    )
    jobs.add_argument(
        "--cluster",
        action="store_true",
        help="every job of the cluster the broker holds, not only those this node took part in",
    )


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is ``jobs``; ``None`` otherwise."""
    if args.command != "jobs":
        return None
    if args.follow:
        return follow_jobs(args.data_dir, limit=args.limit, as_json=args.json, cluster=args.cluster)
    return list_jobs(args.data_dir, limit=args.limit, as_json=args.json, cluster=args.cluster)


class JobsView(msgspec.Struct, frozen=True):
    """Which jobs ``pair jobs`` shows and what it calls their nodes."""

    only: NodeId | None = None  # show only the jobs this node took part in; None: every job
    names: Mapping[NodeId, str] = msgspec.field(default_factory=dict)

    def shows(self, job: JobRecord) -> bool:
        """Whether ``job`` is one to show: ``only`` received, sent or served it."""
        if self.only is None:
            return True
        return self.only in (job.origin, job.target, job.serving)

    def query(self, limit: int) -> JobsQuery:
        """What to ask the broker for: when filtering, as many as it gives, then cut."""
        return JobsQuery(limit=limit if self.only is None else MAX_LIMIT)

    def select(self, snapshot: JobsSnapshot, limit: int) -> JobsSnapshot:
        """The snapshot with only the jobs to show, at most ``limit``, newest first."""
        shown = [job for job in snapshot.jobs if self.shows(job)]
        return JobsSnapshot(seq=snapshot.seq, jobs=shown[:limit])


async def _view(peer: RpcPeer, *, cluster: bool) -> JobsView:
    directory = await fetch_directory(peer)
    return JobsView(None if cluster else directory.here.node_id, directory.names())


def list_jobs(data_dir: str | None, *, limit: int, as_json: bool, cluster: bool = False) -> int:
    """``pair jobs``."""
    return run_with_broker(
        data_dir, lambda peer: show_jobs(peer, limit=limit, as_json=as_json, cluster=cluster)
    )


async def show_jobs(peer: RpcPeer, *, limit: int, as_json: bool, cluster: bool) -> int:
    """Print the newest jobs (this node's, or with ``cluster`` every one) as a table or JSON."""
    view = await _view(peer, cluster=cluster)
    raw = await contract.call(peer, methods.JOBS_GET_INITIAL, view.query(limit))
    snapshot = view.select(raw, limit)
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(snapshot)).decode())
    else:
        print(format_jobs(snapshot.jobs, time.time(), view.names))
    return exit_codes.OK


def follow_jobs(data_dir: str | None, *, limit: int, as_json: bool, cluster: bool = False) -> int:
    """``pair jobs --follow``: the snapshot oldest first, then a line per change."""
    follower = JobsFollower(print, as_json=as_json)

    async def work(peer: RpcPeer) -> int:
        view = await _view(peer, cluster=cluster)
        snapshot = await contract.call(peer, methods.JOBS_SUBSCRIBE, view.query(limit))
        follower.start(snapshot, view, limit)
        await peer.wait_closed()
        print("pair: the broker stopped", file=sys.stderr)
        return exit_codes.ERROR

    try:
        return run_with_broker(data_dir, work, on_push=follower.on_push)
    except KeyboardInterrupt:
        return exit_codes.OK


class JobsFollower:
    """Prints a ``jobs:subscribe`` snapshot, then the events after its ``seq``, of the jobs
    its view shows (once shown, a job's later changes are shown too, wherever it goes).

    Pushes can arrive before the snapshot's answer is read; they wait for it.
    """

    def __init__(
        self,
        out: Callable[[str], None],
        *,
        as_json: bool = False,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._out = out
        self._as_json = as_json
        self._now = now
        self._seq: int | None = None
        self._early: list[JobsEvent] = []
        self._view = JobsView()
        self._shown: set[JobKey] = set()
        # Each shown job's last printed state and attempt: a line only when one changes.
        self._printed: dict[JobKey, tuple[JobState, int]] = {}

    def start(
        self, snapshot: JobsSnapshot, view: JobsView | None = None, limit: int = MAX_LIMIT
    ) -> None:
        """Print the snapshot (what ``view`` shows of it), then any event that came before it."""
        self._seq = snapshot.seq
        self._view = view or JobsView()
        self._shown = {w.key for w in snapshot.jobs if self._view.shows(w)}
        self._printed = {w.key: (w.state, w.attempt) for w in snapshot.jobs}
        selected = self._view.select(snapshot, limit)
        if self._as_json:
            self._out(msgspec.json.encode(selected).decode())
        else:
            newest_last = list(reversed(selected.jobs))
            self._out(format_jobs(newest_last, self._now(), self._view.names))
        early, self._early = self._early, []
        for event in early:
            self._show(event)

    def on_push(self, method: str, params: Any) -> None:
        """Handle one push (the CLI connection's notification hook)."""
        if method != methods.JOBS_EVENT.name:
            return
        event = methods.JOBS_EVENT.decode(params)
        if self._seq is None:
            self._early.append(event)
        else:
            self._show(event)

    def _show(self, event: JobsEvent) -> None:
        assert self._seq is not None
        if event.seq <= self._seq:
            return  # already in the snapshot
        self._seq = event.seq
        if isinstance(event, JobUpserted):
            if event.key not in self._shown and not self._view.shows(event.job):
                return
            self._shown.add(event.key)
        elif event.key in self._shown:
            self._shown.discard(event.key)
            self._printed.pop(event.key, None)
        else:
            return  # a job this view never showed left the history
        if self._as_json:
            self._out(msgspec.json.encode(event).decode())
        elif isinstance(event, JobUpserted):
            self._print_change(event.job)

    def _print_change(self, job: JobRecord) -> None:
        now = (job.state, job.attempt)
        if self._printed.get(job.key) == now:
            return  # the same state (a target chosen within an attempt): no new line
        self._printed[job.key] = now
        self._out(format_change(job, self._now(), self._view.names))


def format_jobs(
    jobs: list[JobRecord], now: float, names: Mapping[NodeId, str] | None = None
) -> str:
    """The jobs table, in the order given; ``names`` names the nodes it knows."""
    lines = [HEADER, *(format_job(job, now, names) for job in jobs)]
    if not jobs:
        lines.append("no jobs yet")
    return "\n".join(lines)


def format_job(job: JobRecord, now: float, names: Mapping[NodeId, str] | None = None) -> str:
    """One row of the jobs table: nodes by name where ``names`` knows them, else 8-char ids."""
    known = names or {}
    serving = job.serving or job.target
    route = f"{_node(job.origin, known)}→{_node(serving, known)}"
    error = last_text(job)
    client = _fit(_client(job), CLIENT_WIDTH - 1)
    return (
        f"{STATE_LABELS[job.state]:<11}{_fit(job.model, MODEL_WIDTH - 1):<{MODEL_WIDTH}}"
        f"{_fit(job.engine, 9):<10}{client:<{CLIENT_WIDTH}}{route:<{ROUTE_WIDTH}}"
        f"{_age(now - job.created_at):<6}"
        f"{_duration(job, now):<10}{error}"
    ).rstrip()


def format_change(job: JobRecord, now: float, names: Mapping[NodeId, str] | None = None) -> str:
    """One ``--follow`` line: the local time it was seen, the job's short id, its state (with
    "attempt N/M" once retried), then the row's model, engine, client, route, duration, error."""
    known = names or {}
    state = STATE_LABELS[job.state]
    if job.attempt > 1:
        state += f" (attempt {job.attempt}/{MAX_ATTEMPTS})"
    route = f"{_node(job.origin, known)}→{_node(job.serving or job.target, known)}"
    client = _fit(_client(job), CLIENT_WIDTH - 1)
    error = last_text(job)
    return (
        f"{time.strftime('%H:%M:%S', time.localtime(now))}  {short_job_id(job.key):<{SHORT_JOB}}"
        f"{state:<24}{_fit(job.model, MODEL_WIDTH - 1):<{MODEL_WIDTH}}{_fit(job.engine, 9):<10}"
        f"{client:<{CLIENT_WIDTH}}{route:<{ROUTE_WIDTH}}{_duration(job, now):<10}{error}"
    ).rstrip()


def last_text(job: JobRecord) -> str:
    """The last column, on one line: the error, or a replica planner's job's action and note
    (``Load replica: qwen2.5 waited 18 s on gpu-box; loading it on laptop``; a failed one's
    error after the action)."""
    error = " ".join((job.error or "").split())
    action = REPLICA_ACTIONS.get(job.path)
    if action is None:
        return error
    note = " ".join((job.note or "").split())
    if error:
        return f"{action} failed: {error}" + (f" — {note}" if note else "")
    return f"{action}: {note}" if note else action


def _client(job: JobRecord) -> str:
    """Who asked, as one word: the key's name, ``loopback``, or ``PAIR`` for its planner."""
    if job.client is None and job.path in REPLICA_ACTIONS:
        return "PAIR"
    return "_".join((job.client or "-").split())


def short_job_id(key: str) -> str:
    """A job's key without its origin (``<run id>/<n>``): unique among the jobs a node shows."""
    return key.split("/", 1)[-1]


def _node(node_id: NodeId | None, names: Mapping[NodeId, str]) -> str:
    if node_id is None:
        return "-"
    name = " ".join(names.get(node_id, "").split())
    return _fit(name, NODE_WIDTH) if name else _short(node_id)


def _short(node_id: str | None) -> str:
    return node_id[:SHORT_ID] if node_id else "-"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _duration(job: JobRecord, now: float) -> str:
    end = job.completed_at if job.completed_at is not None else now
    seconds = max(0.0, end - job.created_at)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be 1-{MAX_LIMIT}")
    return value
