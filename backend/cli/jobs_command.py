"""``pair jobs``: the jobs (inference requests) this node's front doors saw, newest first;
``--follow`` then prints every change as a line until Ctrl+C."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from backend.cli import exit_codes
from backend.cli.client_commands import run_with_broker
from backend.protocol import contract, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types import (
    JobState,
    Workload,
    WorkloadsEvent,
    WorkloadsQuery,
    WorkloadsSnapshot,
    WorkloadUpserted,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
SHORT_ID = 8
MODEL_WIDTH = 28
STATE_LABELS: dict[JobState, str] = {
    "in_flight": "In flight",
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
HEADER = (
    f"{'STATE':<11}{'MODEL':<{MODEL_WIDTH}}{'ENGINE':<10}{'ORIGIN→NODE':<19}"
    f"{'AGE':<6}{'DURATION':<10}ERROR"
)


def add_parser(commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``jobs``."""
    jobs = commands.add_parser("jobs", help="list the jobs this node's front doors saw")
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


def run(args: argparse.Namespace) -> int | None:
    """Run the command if it is ``jobs``; ``None`` otherwise."""
    if args.command != "jobs":
        return None
    if args.follow:
        return follow_jobs(args.data_dir, limit=args.limit, as_json=args.json)
    return list_jobs(args.data_dir, limit=args.limit, as_json=args.json)


def list_jobs(data_dir: str | None, *, limit: int, as_json: bool) -> int:
    """``pair jobs``."""

    async def work(peer: RpcPeer) -> int:
        query = WorkloadsQuery(limit=limit)
        snapshot = await contract.call(peer, methods.WORKLOADS_GET_INITIAL, query)
        if as_json:
            print(msgspec.json.format(msgspec.json.encode(snapshot)).decode())
            return exit_codes.OK
        print(format_jobs(snapshot.workloads, time.time()))
        return exit_codes.OK

    return run_with_broker(data_dir, work)


def follow_jobs(data_dir: str | None, *, limit: int, as_json: bool) -> int:
    """``pair jobs --follow``: the snapshot oldest first, then a line per change."""
    follower = JobsFollower(print, as_json=as_json)

    async def work(peer: RpcPeer) -> int:
        query = WorkloadsQuery(limit=limit)
        follower.start(await contract.call(peer, methods.WORKLOADS_SUBSCRIBE, query))
        await peer.wait_closed()
        print("pair: the broker stopped", file=sys.stderr)
        return exit_codes.ERROR

    try:
        return run_with_broker(data_dir, work, on_push=follower.on_push)
    except KeyboardInterrupt:
        return exit_codes.OK


class JobsFollower:
    """Prints a ``workloads:subscribe`` snapshot, then the events after its ``seq``.

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
        self._early: list[WorkloadsEvent] = []

    def start(self, snapshot: WorkloadsSnapshot) -> None:
        """Print the snapshot, then any event that came before it."""
        self._seq = snapshot.seq
        if self._as_json:
            self._out(msgspec.json.encode(snapshot).decode())
        else:
            self._out(format_jobs(list(reversed(snapshot.workloads)), self._now()))
        early, self._early = self._early, []
        for event in early:
            self._show(event)

    def on_push(self, method: str, params: Any) -> None:
        """Handle one push (the CLI connection's notification hook)."""
        if method != methods.WORKLOADS_EVENT.name:
            return
        event = methods.WORKLOADS_EVENT.decode(params)
        if self._seq is None:
            self._early.append(event)
        else:
            self._show(event)

    def _show(self, event: WorkloadsEvent) -> None:
        assert self._seq is not None
        if event.seq <= self._seq:
            return  # already in the snapshot
        self._seq = event.seq
        if self._as_json:
            self._out(msgspec.json.encode(event).decode())
        elif isinstance(event, WorkloadUpserted):
            self._out(format_job(event.workload, self._now()))


def format_jobs(workloads: list[Workload], now: float) -> str:
    """The jobs table, in the order given."""
    lines = [HEADER, *(format_job(workload, now) for workload in workloads)]
    if not workloads:
        lines.append("no jobs yet")
    return "\n".join(lines)


def format_job(workload: Workload, now: float) -> str:
    """One row of the jobs table."""
    route = f"{_short(workload.origin)}→{_short(workload.serving or workload.target)}"
    error = " ".join((workload.error or "").split())
    return (
        f"{STATE_LABELS[workload.state]:<11}{_fit(workload.model, MODEL_WIDTH - 1):<{MODEL_WIDTH}}"
        f"{_fit(workload.engine, 9):<10}{route:<19}{_age(now - workload.created_at):<6}"
        f"{_duration(workload, now):<10}{error}"
    ).rstrip()


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


def _duration(workload: Workload, now: float) -> str:
    end = workload.completed_at if workload.completed_at is not None else now
    seconds = max(0.0, end - workload.created_at)
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
