"""Replicas on demand: p50/p95 latency of a bursty trace with replicas off and on.

    .venv/bin/python bench/replicas.py [--quick] [--speedup 1] [--seed 38] [--logs DIR]
                                       [--modes off,on] [--routes on-disk|resident]

Three emulated nodes on this computer (``_replicas_rig.py``), each an Ollama emulator with every
model on disk at its own pace and load time, behind the real proxy worker: node A's front door
is measured; B and C are its peers over mutual TLS. At the start the hot model (``coder``) is
loaded on node A only; the steady models (``chat``, ``notes``) on one node each.

The trace (``_replicas_trace.py``): the steady models at a steady Poisson rate, the hot one at a
trickle plus a burst (by default 1.5 requests/s for 60 s from 20 s in). The same trace is
played twice: replicas **off** (placement as it is: routes among the nodes as they are) and
**on** (the replica planner, today ``_replicas_standin.py`` until the broker runs the
component, loading the hot model on the members that have it on disk). ``--routes``: node A
routes a model to every node with it on disk (placement may then load it there itself, as PAIR
does today: the planner then finds little to add) or only to the nodes with it loaded (static
placement: only the planner adds replicas).

Reported per mode: p50 and p95 latency (request to the last chunk) and time to first token, for
all requests, the hot model's and the steady ones', in seconds at the nodes' nominal speeds;
the time from the burst's start to the first hot request started on a node that did not have
the hot model loaded then; the planner's loads. Target (issue 38): p95 with replicas on at most
half of p95 with them off. ``--quick``: speedup 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from _replicas_rig import SAMPLE_S, SHAPES, Cluster, resident_models
from _replicas_standin import StandInPlanner
from _replicas_trace import (
    HOT,
    Arrival,
    Figures,
    Outcome,
    TraceShape,
    draw_trace,
    first_replica_served,
    grouped,
)

from backend.components.replicas.plan import Policy

TARGET_P95_RATIO = 0.5


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _nothing() -> None:
    """No stand-in planner to tell."""


async def ask(
    session: aiohttp.ClientSession,
    door: str,
    arrival: Arrival,
    answering: Callable[[], None] = _nothing,
) -> Outcome:
    """One streamed chat through the door; its latency and time to first token. ``answering``
    is called at the first token (or the end, whichever comes first)."""
    try:
        return await _ask(session, door, arrival, answering)
    finally:
        answering()


async def _ask(
    session: aiohttp.ClientSession, door: str, arrival: Arrival, answering: Callable[[], None]
) -> Outcome:
    body = {
        "model": arrival.model,
        "messages": [{"role": "user", "content": f"Request at {arrival.at:.3f} s."}],
        "stream": True,
        "options": {"num_predict": arrival.tokens},
    }
    started = time.perf_counter()
    first: float | None = None
    try:
        async with session.post(f"{door}/api/chat", json=body) as response:
            if response.status != 200:
                error = f"HTTP {response.status}: {(await response.read())[:200]!r}"
                return Outcome(arrival, error=error)
            async for line in response.content:
                said = line.strip() and json.loads(line).get("message", {}).get("content")
                if first is None and said:
                    first = time.perf_counter() - started
                    answering()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Outcome(arrival, error=repr(exc))
    return Outcome(arrival, latency=time.perf_counter() - started, first_token=first)


class Run:
    """One mode's run of the trace: what the client saw, the replica figure, the loads."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.first_replica_s: float | None = None
        self.loads: list[str] = []


async def refresh_until(cluster: Cluster, done: asyncio.Event) -> None:
    """Node A's table every ``SAMPLE_S`` until ``done``, as node-info would refresh it."""
    while not done.is_set():
        await cluster.refresh()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), SAMPLE_S)


async def play(
    cluster: Cluster,
    trace: list[Arrival],
    shape: TraceShape,
    planner: StandInPlanner | None,
    speedup: float = 1.0,
) -> Run:
    """Play ``trace`` through node A's door; with ``planner``, replicas on."""
    await cluster.reset()
    run = Run()
    done = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=3600)
    begin = time.perf_counter()
    burst_at = time.monotonic() + shape.burst_start_s
    warm: dict[str, bool] = {}
    async with (
        asyncio.TaskGroup() as group,
        aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        group.create_task(refresh_until(cluster, done), name="table refresh")
        if planner is not None:
            group.create_task(planner.run_until(done), name="stand-in planner")
        asks = []
        for arrival in trace:
            await asyncio.sleep(max(0.0, begin + arrival.at - time.perf_counter()))
            if arrival.burst and not warm:
                states = await cluster.states()
                warm = {
                    s.node_id: HOT in resident_models(st)
                    for s, st in zip(cluster.shapes, states, strict=True)
                }
            answering: Callable[[], None] = _nothing
            if planner is not None:
                answering = functools.partial(planner.answering, planner.arrived(arrival.model))
            asks.append(group.create_task(ask(session, cluster.door(), arrival, answering)))
        run.outcomes = list(await asyncio.gather(*asks))
        done.set()
    run.first_replica_s = first_replica_served(await cluster.started(), warm, burst_at)
    if planner is not None:
        # The reasons' waits are the emulated cluster's (speedup times faster), the offsets nominal.
        run.loads = [
            f"{(at - burst_at) * speedup:+.1f} s: {load.reason}" for at, load in planner.loads
        ]
    return run


def seconds(value: float | None, speedup: float) -> str:
    return "-" if value is None or value != value else f"{value * speedup:.1f}"


def rows(mode: str, run: Run, speedup: float) -> list[str]:
    """The table rows of one mode: one per group of requests."""
    found = []
    for group, fig in grouped(run.outcomes).items():
        found.append(
            f"| {mode} | {group} | {fig.count} | {seconds(fig.p50_s, speedup)} "
            f"| {seconds(fig.p95_s, speedup)} | {seconds(fig.first_token_p50_s, speedup)} "
            f"| {seconds(fig.first_token_p95_s, speedup)} | {fig.failed} "
            f"| {seconds(run.first_replica_s, speedup) if group == 'all' else ''} |"
        )
    return found


def verdict(off: Figures, on: Figures) -> str:
    ratio = on.p95_s / off.p95_s if off.p95_s else float("nan")
    met = ratio <= TARGET_P95_RATIO
    return f"p95 with replicas on {ratio:.2f}x off (target <= {TARGET_P95_RATIO}): " + (
        "met" if met else "NOT met"
    )


async def bench(args: argparse.Namespace, logs: Path) -> None:
    shapes = tuple(shape.scaled(args.speedup) for shape in SHAPES)
    trace_shape = TraceShape().scaled(args.speedup)
    trace = draw_trace(trace_shape, args.seed)
    cluster = Cluster(shapes, logs, args.routes)
    progress(f"starting three emulators and three proxies; {len(trace)} requests per run")
    await asyncio.to_thread(cluster.start)
    runs: dict[str, Run] = {}
    try:
        for mode in args.modes:
            progress(f"replicas {mode}")
            planner = None
            if mode == "on":
                policy = Policy(
                    target_wait_s=10.0 / args.speedup,
                    stable_window_s=60.0 / args.speedup,
                    panic_window_s=6.0 / args.speedup,
                )
                planner = StandInPlanner(cluster, policy)
            runs[mode] = await play(cluster, trace, trace_shape, planner, args.speedup)
            if planner is not None:
                peaks = ", ".join(
                    f"{m} {w * args.speedup:.1f} s" for m, w in planner.peak_wait_s.items()
                )
                progress(f"  the planner's loads: {len(runs[mode].loads)}; peak waits: {peaks}")
            for line in runs[mode].loads:
                progress(f"  load {line}")
    finally:
        await asyncio.to_thread(cluster.stop)
    print(
        "\n| replicas | requests | count | p50 s | p95 s | TTFT p50 s | TTFT p95 s | failed "
        "| burst to first replica-served s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, run in runs.items():
        print("\n".join(rows(mode, run, args.speedup)))
    if {"off", "on"} <= runs.keys():
        print(
            "\n"
            + verdict(grouped(runs["off"].outcomes)["all"], grouped(runs["on"].outcomes)["all"])
        )


def main() -> int:
    parser = argparse.ArgumentParser(prog="replicas.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="speedup 2")
    parser.add_argument("--speedup", type=float, default=None, help="run the cluster faster (1)")
    parser.add_argument("--modes", default="off,on", help="which runs, in order (off,on)")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument(
        "--routes",
        choices=["on-disk", "resident"],
        default="on-disk",
        help="node A routes to nodes with the model on disk (placement may load it) or loaded",
    )
    parser.add_argument("--logs", type=Path, default=None, help="keep the processes' logs here")
    args = parser.parse_args()
    args.speedup = args.speedup or (2.0 if args.quick else 1.0)
    args.modes = [part for part in args.modes.split(",") if part]
    print(
        f"## Replicas on three emulated nodes ({platform.node()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}); speedup {args.speedup:g}, seed {args.seed}, "
        f"routes to nodes with the model {args.routes}"
    )
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.logs))
    else:
        with tempfile.TemporaryDirectory(prefix="pair-replicas-bench-") as directory:
            asyncio.run(bench(args, Path(directory)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
