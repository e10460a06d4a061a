"""Placement on a simulated cluster: round robin, the reference's rule and PAIR's, one trace.

    .venv/bin/python bench/placement.py [--quick] [--requests 150] [--speedup 1]
                                        [--loads 0.3,0.6,0.85] [--seed 17] [--logs DIR]

Three emulated nodes on this computer (``_placement_cluster.py``): node A, whose front door
is measured, with its own engine at 30 tokens/s and 2 slots; node B, its paired peer over
mutual TLS, at 60 tokens/s with 4 slots but the model not loaded at the start (5 s to load);
node C at 12 tokens/s with 1 slot. Each engine is PAIR's Ollama emulator with the model's own
speed, slots, load time and first-token delay (``pair emulate ollama --model-pace``).

For each load (a share of the cluster's capacity: the sum of slots x tokens/s over the mean
answer length) one arrival trace is drawn: Poisson arrivals, answers from a lognormal whose
mean is 250 tokens (sigma 0.6, 16-1,200), 30 % of the requests the next turn of an earlier
chat (the same opening, so the same session). The same trace is then played through node A's
Ollama door (``/api/chat``, streamed, each answer's length set by ``num_predict``) under each
policy in turn: ``round_robin`` (owners in turn), ``reference`` (pending + GPU pressure +
reservations) and ``pair`` (expected completion; docs/PLACEMENT.md). Before each run the
cold node's model is unloaded and node A's proxy is started afresh, so no run inherits
another's measurements. Node A's table is refreshed every 2 s as node-info would: resident
models, slots, and a GPU sample (the emulators have no GPU: the share of slots busy).

Reported per load and policy: mean and p95 job latency (request to the last chunk) and time
to first token (to the first chunk with content), in seconds at the nodes' nominal speeds
(``--speedup`` runs every figure of the cluster and the arrival rate that many times faster and
scales the times back), and the requests each node served. ``--quick``: speedup 2, 40 requests
per load (about 16 minutes on 2 cores; round robin drains a long queue on the slow node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from _common import median, percentile
from _placement_cluster import MODEL, SHAPES, Cluster, Shape

from backend.protocol.proxy import PlacementPolicy

POLICIES: tuple[PlacementPolicy, ...] = ("round_robin", "reference", "pair")
MEAN_TOKENS = 250.0
SIGMA = 0.6
TOKEN_RANGE = (16, 1200)
FOLLOW_UP_SHARE = 0.3
TARGET_MEAN_RATIO = 0.7


@dataclass(frozen=True)
class Arrival:
    """One request of the trace: when, which chat and turn, how many tokens it answers."""

    at: float
    chat: int
    turn: int
    tokens: int


@dataclass
class Outcome:
    """What the client saw of one request (seconds)."""

    latency: float | None = None
    first_token: float | None = None
    error: str | None = None


@dataclass
class Run:
    """One policy's run of one trace."""

    outcomes: list[Outcome] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    def latencies(self) -> list[float]:
        return [o.latency for o in self.outcomes if o.latency is not None]

    def first_tokens(self) -> list[float]:
        return [o.first_token for o in self.outcomes if o.first_token is not None]

    def errors(self) -> list[str]:
        return [o.error for o in self.outcomes if o.error is not None]


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def capacity(shapes: tuple[Shape, ...]) -> float:
    """Requests per second the cluster can finish at the mean answer length."""
    return sum(s.tokens_per_s * s.slots for s in shapes) / MEAN_TOKENS


def draw_trace(rate: float, count: int, seed: int) -> list[Arrival]:
    """Poisson arrivals at ``rate``/s, lognormal lengths, a share of follow-up turns."""
    chooser = random.Random(seed)
    mu = math.log(MEAN_TOKENS) - SIGMA**2 / 2
    turns: list[int] = []
    at = 0.0
    trace: list[Arrival] = []
    for _ in range(count):
        at += chooser.expovariate(rate)
        tokens = min(TOKEN_RANGE[1], max(TOKEN_RANGE[0], round(chooser.lognormvariate(mu, SIGMA))))
        if turns and chooser.random() < FOLLOW_UP_SHARE:
            chat = chooser.randrange(max(0, len(turns) - 8), len(turns))
            turns[chat] += 1
        else:
            chat = len(turns)
            turns.append(0)
        trace.append(Arrival(at, chat, turns[chat], tokens))
    return trace


def messages(arrival: Arrival) -> list[dict[str, str]]:
    """The chat so far: the same opening every turn (one session), then the turns."""
    said = [
        {"role": "system", "content": f"You are the assistant of benchmark chat {arrival.chat}."},
        {"role": "user", "content": f"Chat {arrival.chat}: tell me about placement."},
    ]
    for turn in range(1, arrival.turn + 1):
        said.append({"role": "assistant", "content": f"Answer {turn - 1} of chat {arrival.chat}."})
        said.append({"role": "user", "content": f"Go on ({turn})."})
    return said


async def ask(session: aiohttp.ClientSession, door: str, arrival: Arrival) -> Outcome:
    """One streamed chat turn through the door; its latency and time to first token."""
    body = {
        "model": MODEL,
        "messages": messages(arrival),
        "stream": True,
        "options": {"num_predict": arrival.tokens, "seed": arrival.chat * 1000 + arrival.turn},
    }
    started = time.perf_counter()
    first: float | None = None
    try:
        async with session.post(f"{door}/api/chat", json=body) as response:
            if response.status != 200:
                return Outcome(error=f"HTTP {response.status}: {(await response.read())[:200]!r}")
            async for line in response.content:
                if first is None and line.strip():
                    record = json.loads(line)
                    if record.get("message", {}).get("content"):
                        first = time.perf_counter() - started
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Outcome(error=repr(exc))
    return Outcome(latency=time.perf_counter() - started, first_token=first)


async def play(cluster: Cluster, policy: PlacementPolicy, trace: list[Arrival]) -> Run:
    """Play ``trace`` through node A's door under ``policy``."""
    await cluster.reset(policy)
    before = await cluster.served()
    done = asyncio.Event()
    run = Run()
    timeout = aiohttp.ClientTimeout(total=3600)
    connector = aiohttp.TCPConnector(limit=0)
    begin = time.perf_counter()
    async with (
        asyncio.TaskGroup() as group,
        aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
    ):
        group.create_task(cluster.sample_until(done), name="table refresh")
        asks = []
        for arrival in trace:
            await asyncio.sleep(max(0.0, begin + arrival.at - time.perf_counter()))
            asks.append(group.create_task(ask(session, cluster.door(), arrival)))
        run.outcomes = list(await asyncio.gather(*asks))
        done.set()
    run.wall_s = time.perf_counter() - begin
    after = await cluster.served()
    run.served = {node: after[node] - before.get(node, 0) for node in after}
    return run


def seconds(value: float, speedup: float) -> str:
    return "-" if math.isnan(value) else f"{value * speedup:.1f}"


def mean(samples: list[float]) -> float:
    return sum(samples) / len(samples) if samples else float("nan")


def report(load: float, runs: dict[PlacementPolicy, Run], speedup: float) -> list[str]:
    """The table rows of one load; the verdict on the target."""
    reference = runs["reference"]
    ref_mean, ref_p95 = mean(reference.latencies()), percentile(reference.latencies(), 0.95)
    rows = []
    for policy, run in runs.items():
        latencies, firsts = run.latencies(), run.first_tokens()
        run_mean, p95 = mean(latencies), percentile(latencies, 0.95)
        served = " / ".join(str(run.served.get(s.node_id, 0)) for s in SHAPES)
        rows.append(
            f"| {load:.0%} | {policy} | {seconds(run_mean, speedup)} | {seconds(p95, speedup)} "
            f"| {seconds(mean(firsts), speedup)} | {seconds(percentile(firsts, 0.95), speedup)} "
            f"| {seconds(median(latencies), speedup)} "
            f"| {run_mean / ref_mean:.2f}x | {p95 / ref_p95:.2f}x | {served} "
            f"| {len(run.errors())} |"
        )
    pair = runs["pair"]
    pair_mean, pair_p95 = mean(pair.latencies()), percentile(pair.latencies(), 0.95)
    met = pair_mean <= TARGET_MEAN_RATIO * ref_mean and pair_p95 <= ref_p95
    verdict = (
        f"{load:.0%}: pair mean {pair_mean / ref_mean:.2f}x the reference's (target <= "
        f"{TARGET_MEAN_RATIO}), p95 {pair_p95 / ref_p95:.2f}x (target <= 1): "
        + ("met" if met else "NOT met")
    )
    return [*rows, verdict]


async def bench(args: argparse.Namespace, logs: Path) -> None:
    shapes = tuple(shape.scaled(args.speedup) for shape in SHAPES)
    cluster = Cluster(shapes, logs)
    progress("starting three emulators and three proxies")
    await asyncio.to_thread(cluster.start)
    rows: list[str] = []
    verdicts: list[str] = []
    try:
        for load in args.loads:
            rate = load * capacity(shapes)
            trace = draw_trace(rate, args.requests, args.seed + round(load * 100))
            runs: dict[PlacementPolicy, Run] = {}
            for policy in POLICIES:
                progress(f"load {load:.0%} ({rate:.2f} req/s): {policy}")
                runs[policy] = await play(cluster, policy, trace)
                for error in runs[policy].errors()[:3]:
                    progress(f"  error: {error}")
            *load_rows, verdict = report(load, runs, args.speedup)
            rows += load_rows
            verdicts.append(verdict)
    finally:
        await asyncio.to_thread(cluster.stop)
    print(
        "\n| load | policy | mean s | p95 s | TTFT mean s | TTFT p95 s | median s "
        "| mean vs reference | p95 vs reference | served A / B / C | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n" + "\n".join(verdicts))


def main() -> int:
    parser = argparse.ArgumentParser(prog="placement.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="speedup 2, 40 requests per load")
    parser.add_argument("--requests", type=int, default=None, help="requests per load (150)")
    parser.add_argument("--speedup", type=float, default=None, help="run the cluster faster (1)")
    parser.add_argument("--loads", default="0.3,0.6,0.85", help="shares of the capacity")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--logs", type=Path, default=None, help="keep the processes' logs here")
    args = parser.parse_args()
    args.requests = args.requests or (40 if args.quick else 150)
    args.speedup = args.speedup or (2.0 if args.quick else 1.0)
    args.loads = [float(part) for part in args.loads.split(",")]
    print(
        f"## Placement on three emulated nodes ({platform.node()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f})\n\n"
        + ", ".join(
            f"{s.node_id}: {s.slots} slots x {s.tokens_per_s:g} tok/s"
            + ("" if s.warm else f" (cold, {s.load_s:g} s load)")
            for s in SHAPES
        )
        + f"; {args.requests} requests per load, speedup {args.speedup:g}, seed {args.seed}; "
        f"capacity {capacity(SHAPES):.2f} req/s at {MEAN_TOKENS:g} tokens."
    )
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.logs))
    else:
        with tempfile.TemporaryDirectory(prefix="pair-placement-bench-") as directory:
            asyncio.run(bench(args, Path(directory)))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
