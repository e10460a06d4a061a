"""Replicas on demand: p50/p95 latency of a bursty trace with the replica planner off and on.

    .venv/bin/python bench/replicas.py [--quick] [--shape step|ramp] [--seed 38]
                                       [--target-wait 3] [--modes off,on] [--logs DIR]

Three real brokers (``pair node``) on this computer's loopback addresses, paired by PIN, each
with the Ollama emulator as its engine (``_replicas_rig.py``): every model on disk everywhere,
a load takes 12 s, an answer about a second, one slot per model. The hot model (``coder``) is
the user's on A only; the steady ones (``chat``, ``notes``) are the user's on B and C. The
trace is played at A's Ollama door.

Warm-up: A's door sends one hot request to B and one to C (A pinned to each in turn) and the
hot model is unloaded there again. Placement (docs/PLACEMENT.md) charges a node the load time
it has MEASURED there; a node never measured pays no load and is tried at once, so without the
warm-up the burst's first requests would go to B and C and load the model there by routing,
which hides the difference between a queue on A and a replica the planner loads ahead of it.

The same trace (``_replicas_trace.py``: the steady models at a Poisson rate, the hot one at a
trickle plus a burst, ``--shape step`` at its peak rate at once or ``ramp`` rising to it over
30 s, 15 s quick, as a team's demand builds up in the morning) is played twice on the same
brokers: ``replicas_mode=off`` (placement alone, which may still load the hot model on B or C
when A's queue grows longer than their load) and ``on`` (the broker's planner,
``backend/components/replicas/``, with ``replicas_target_wait_s``). Before each run the planner
is off and the hot model unloaded wherever a member holds it, so each run starts alike;
placement keeps its measurements. Brokers are not restarted per run: their start, the users'
loads and the warm-up take a minute.

Printed per mode: p50/p95 latency (request to the last chunk) and time to first token for all
requests, the hot model's and the steady ones'; the time from the burst's start to the first
hot request served by a replica the planner loaded, and to the first served by any node but A;
the hot requests each node served; the planner's loads and their reasons (A's ``jobs:list``).
Target (issue 38): p95 with replicas on at most half of p95 with them off. ``--quick``: a
shorter burst and trace (about 2.5 minutes with the rig's start, 3 with the ramp).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from _common import percentile
from _replicas_rig import Rig
from _replicas_trace import (
    HOT,
    SHAPES,
    Arrival,
    Figures,
    Outcome,
    TraceShape,
    draw_trace,
    first_replica_served,
    first_served_elsewhere,
    grouped,
    planner_loads,
    served_counts,
    waits_by_node,
)

from backend.protocol.types.jobs import JobRecord
from backend.workers.proxy.upstream.forward import SERVED_BY_HEADER

TARGET_P95_RATIO = 0.5
SETTLE_S = 3.0  # between runs: the demand meter's last report has gone out


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def ask(session: aiohttp.ClientSession, door: str, arrival: Arrival) -> Outcome:
    """One streamed chat through the door: its latency, first token and serving node."""
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
            served_by = response.headers.get(SERVED_BY_HEADER)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Outcome(arrival, error=repr(exc))
    latency = time.perf_counter() - started
    return Outcome(arrival, latency=latency, first_token=first, served_by=served_by)


class Run:
    """One mode's run: what the client saw, A's jobs of the run, the burst's start (wall)."""

    def __init__(self, outcomes: list[Outcome], jobs: list[JobRecord], burst_at: float) -> None:
        self.outcomes = outcomes
        self.jobs = jobs
        self.burst_at = burst_at


async def play(rig: Rig, trace: list[Arrival], shape: TraceShape) -> Run:
    """Play ``trace`` through A's door, every request to its end."""
    timeout = aiohttp.ClientTimeout(total=900)
    begin, begin_wall = time.perf_counter(), time.time()
    async with (
        asyncio.TaskGroup() as group,
        aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        asks = []
        for arrival in trace:
            await asyncio.sleep(max(0.0, begin + arrival.at - time.perf_counter()))
            asks.append(group.create_task(ask(session, rig.nodes[0].door, arrival)))
        outcomes = list(await asyncio.gather(*asks))
    return Run(outcomes, await rig.jobs(since=begin_wall), begin_wall + shape.burst_start_s)


async def reset(rig: Rig) -> None:
    """Planner off, the hot model unloaded on B and C: every run starts alike."""
    await rig.settings(replicas_mode="off")
    for node in await rig.hot_loaded_on():
        progress(f"  unloading the hot model on {node.name}")
        await rig.unload_hot(node)
    await asyncio.sleep(SETTLE_S)


def seconds(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def rows(mode: str, run: Run, rig: Rig) -> list[str]:
    """The table rows of one mode: one per group of requests."""
    door = rig.nodes[0].node_id
    replica = seconds(first_replica_served(run.jobs, run.burst_at))
    elsewhere = seconds(first_served_elsewhere(run.jobs, door, run.burst_at))
    found = []
    for group, fig in grouped(run.outcomes).items():
        extra = f"{replica} | {elsewhere}" if group == "all" else " | "
        found.append(
            f"| {mode} | {group} | {fig.count} | {seconds(fig.p50_s)} | {seconds(fig.p95_s)} "
            f"| {seconds(fig.first_token_p50_s)} | {seconds(fig.first_token_p95_s)} "
            f"| {fig.failed} | {extra} |"
        )
    return found


def where_served(run: Run, rig: Rig) -> str:
    """The hot requests each node served, with their p95 latency there."""
    parts = []
    for node_id, count in sorted(served_counts(run.outcomes, HOT).items()):
        latencies = [
            o.latency
            for o in run.outcomes
            if o.arrival.model == HOT and o.served_by == node_id and o.latency is not None
        ]
        parts.append(f"{rig.label(node_id)} {count} (p95 {percentile(latencies, 0.95):.1f} s)")
    return ", ".join(parts) or "none"


def where_waited(run: Run, rig: Rig, hot: bool) -> str:
    """Per node, the requests served there and their p95 wait to the first token (A's jobs)."""
    found = waits_by_node(run.jobs, hot)
    return ", ".join(
        f"{rig.label(node)} {count} (p95 {wait:.1f} s)"
        for node, (count, wait) in sorted(found.items())
    )


def loads(run: Run, rig: Rig) -> list[str]:
    """The planner's loads: when (from the burst's start), where, how long, why."""
    found = []
    for job in planner_loads(run.jobs):
        took = f"{job.completed_at - job.created_at:.1f} s" if job.completed_at else job.state
        found.append(
            f"{job.created_at - run.burst_at:+.1f} s on {rig.label(job.target)} "
            f"({job.model}, {took}): {job.note}"
        )
    return found


def verdict(group: str, off: Figures, on: Figures) -> str:
    ratio = on.p95_s / off.p95_s if off.p95_s else float("nan")
    met = "met" if ratio <= TARGET_P95_RATIO else "NOT met"
    return (
        f"p95 ({group}) with replicas on {on.p95_s:.1f} s / off {off.p95_s:.1f} s = "
        f"{ratio:.2f} (target <= {TARGET_P95_RATIO}): {met}"
    )


async def prepare(rig: Rig, args: argparse.Namespace) -> None:
    """Start the rig, load the users' models, measure B's and C's load times at A."""
    started = time.perf_counter()
    progress("starting three brokers and pairing them")
    await rig.start()
    await rig.settings(
        replicas_mode="off",
        replicas_target_wait_s=args.target_wait,
        replicas_ttl_s=3600.0,  # no replica goes idle mid-run
        replicas_max_per_model=3,
    )
    progress("loading the users' models (12 s)")
    await rig.load_user_models()
    progress("warm-up: one hot request served by B and one by C, then unloaded")
    await rig.warm_up()
    progress(f"ready in {time.perf_counter() - started:.0f} s")


async def bench(args: argparse.Namespace, folder: Path) -> None:
    full, quick = SHAPES[args.shape]
    shape = quick if args.quick else full
    trace = draw_trace(shape, args.seed)
    rig = Rig(folder)
    runs: dict[str, Run] = {}
    try:
        await prepare(rig, args)
        for mode in args.modes:
            progress(f"replicas {mode}: {len(trace)} requests over {shape.duration_s:g} s")
            await reset(rig)
            await rig.settings(replicas_mode=mode)
            held = ", ".join(node.name for node in await rig.hot_loaded_on()) or "none"
            progress(f"  members holding the hot model at the start: {held}")
            runs[mode] = await play(rig, trace, shape)
            for line in loads(runs[mode], rig):
                progress(f"  load {line}")
    finally:
        await rig.stop()
    report(runs, rig, shape, args)


def report(runs: dict[str, Run], rig: Rig, shape: TraceShape, args: argparse.Namespace) -> None:
    rise = f"rising to it over {shape.ramp_s:g} s, " if shape.ramp_s > 0 else ""
    print(
        f"\nTrace ({shape.name}): burst {shape.burst_rate:g}/s ({rise}{shape.burst_s:g} s in "
        f"all) from {shape.burst_start_s:g} s, hot trickle {shape.hot_rate:g}/s, "
        f"steady {shape.steady_rate:g}/s per model, {shape.duration_s:g} s; "
        f"replicas_target_wait_s {args.target_wait:g}"
    )
    print(
        "\n| replicas | requests | count | p50 s | p95 s | TTFT p50 s | TTFT p95 s | failed "
        "| burst to first replica-served s | burst to first served off A s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, run in runs.items():
        print("\n".join(rows(mode, run, rig)))
    for mode, run in runs.items():
        print(f"\n{mode}: hot requests served by {where_served(run, rig)}")
        print(f"  waited to the first token (A's jobs): hot {where_waited(run, rig, hot=True)}")
        print(f"  steady {where_waited(run, rig, hot=False)}")
        for line in loads(run, rig) or ["no planner load"]:
            print(f"  {line}")
        for outcome in [o for o in run.outcomes if o.error is not None][:5]:
            at, model = outcome.arrival.at, outcome.arrival.model
            print(f"  failed: {model} at {at:.1f} s: {outcome.error}")
    if {"off", "on"} <= runs.keys():
        off, on = grouped(runs["off"].outcomes), grouped(runs["on"].outcomes)
        print()
        for group in ("all", "hot"):
            print(verdict(group, off[group], on[group]))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="replicas.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter burst and trace")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="step", help="the burst at once or rising"
    )
    parser.add_argument("--modes", default="off,on", help="which runs, in order (off,on)")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--target-wait", type=float, default=3.0, help="replicas_target_wait_s")
    parser.add_argument("--logs", type=Path, default=None, help="keep the brokers' data here")
    args = parser.parse_args()
    args.modes = [part for part in args.modes.split(",") if part]
    quick = ", quick" if args.quick else ""
    print(
        f"## Replicas on three real brokers ({platform.node()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}); seed {args.seed}, {args.shape}{quick}"
    )
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.logs.resolve()))
    else:
        with tempfile.TemporaryDirectory(prefix="pair-replicas-bench-") as directory:
            asyncio.run(bench(args, Path(directory)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
