"""What spreading a model over members costs: time to first token and tokens/s on one node, and
spread over two and three, over plain TCP and through PAIR's RPC tunnel, on loopback and across
network namespaces; the tunnel's added time per token; whether the tokens stay the same.

    .venv/bin/python bench/split.py [--quick] [--requests 30] [--logs DIR] [--loopback-only]

The model is the tiny test model's generator with six blocks, 128 wide (``_split_rig.MODEL_SHAPE``;
5.4 MB in F32), so one, two or three nodes each get whole layers. The layers are shared out
by PAIR's planner (``plan.py``) from equal, made-up free memory: ``--tensor-split`` and ``-ngl``
as PAIR would launch them. Every configuration runs at once (its own ``llama-server``, its own
``rpc-server`` per member, its own tunnel processes); requests go one at a time, a round being
one request to each configuration in a rotating order, so a change in the machine's load falls
on all of them alike. Each request is greedy and seeded (temperature 0, seed 42, no prompt cache,
64 tokens) with a prompt of its own, the same prompts for every configuration. Every
``llama-server`` and ``rpc-server`` computes on one thread (``_split_rig.THREADS``): all the
nodes share this computer's cores, which members of a real cluster do not.

- time to first token: from sending the request to the first token's chunk (the prompt's
  evaluation, through every member's layers, and the first token); p99 is the nearest rank,
  so with 50 requests or fewer it is the slowest;
- tokens/s and ms per token: llama-server's own timing of the tokens after the first (each a
  pass through every member's layers);
- the tunnel's added time per token: median time per token through the tunnel less over plain
  TCP, same topology and network.

Namespaces (``tests/support/netfaults.py``, ``bench/_soak_netns.py``): the host (``llama-server``
and the tunnel's host side) runs in this namespace, each member in a namespace of its own on a
bridge. Without root or ``ip netns`` the namespace rows are left out and the report says why.
Every process is stopped by its PID and every namespace removed, on Ctrl+C too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from _common import median, percentile
from _split_rig import (
    MODEL_SHAPE,
    Config,
    NetworkKind,
    Place,
    Processes,
    Rig,
    binaries,
    network,
    pair_nodes,
    plan_for,
    split_model,
)

MAX_TOKENS = 64
SEED = 42
WARM_UP = 2
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Sample:
    """One request: seconds to the first token (at the client), seconds per later token (by
    llama-server's own clock), and each token's id and log-probability."""

    first_token_s: float
    per_token_s: float
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class Row:
    """A configuration's samples, by prompt number, or why it could not run."""

    config: Config
    url: str = ""
    failed: str = ""
    samples: dict[int, Sample] = field(default_factory=dict)


def configs(with_namespaces: bool) -> list[Config]:
    """One node, then 2 and 3 over plain TCP and the tunnel, per network."""
    networks: tuple[NetworkKind, ...] = (
        ("loopback", "namespaces") if with_namespaces else ("loopback",)
    )
    made = [Config(1, "alone", "loopback")]
    for kind in networks:
        made += [Config(n, carrier, kind) for carrier in ("tcp", "tunnel") for n in (2, 3)]
    return made


def prompt(number: int) -> str:
    """Prompts of one length, each its own (so no request reuses another's cache)."""
    return f"Request {number:04d}: hello world, the model and the router."


async def request(session: aiohttp.ClientSession, url: str, number: int) -> Sample:
    """One streamed, greedy, seeded completion. llama-server's own ``/completion``, for the
    token ids and log-probabilities (the random model's bytes are seldom valid UTF-8, and it
    repeats a token for long: the log-probabilities differ from token to token) and for its
    own timings (a client on a busy machine may read several tokens' chunks at once)."""
    body = {
        "prompt": prompt(number),
        "n_predict": MAX_TOKENS,
        "temperature": 0,
        "seed": SEED,
        "stream": True,
        "cache_prompt": False,
        "n_probs": 1,
    }
    first_token_at, timings = 0.0, dict[str, float]()
    tokens: list[int] = []
    logprobs: list[float] = []
    began = time.perf_counter()
    async with session.post(f"{url}/completion", json=body) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            for chosen in chunk.get("completion_probabilities") or ():
                first_token_at = first_token_at or time.perf_counter()
                tokens.append(chosen["id"])
                logprobs.append(chosen["logprob"])
            timings = chunk.get("timings") or timings
    if len(tokens) != MAX_TOKENS or "predicted_per_token_ms" not in timings:
        raise RuntimeError(f"{url} streamed {len(tokens)} tokens and timings {timings}")
    per_token_s = timings["predicted_per_token_ms"] / 1000
    return Sample(first_token_at - began, per_token_s, tuple(tokens), tuple(logprobs))


async def measure(rows: list[Row], requests: int) -> None:
    """``WARM_UP`` unrecorded requests per configuration, then ``requests`` rounds."""
    running = [row for row in rows if not row.failed]
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    # A connection per request: llama-server may close one after a stream, and a pooled
    # connection it closed fails the next request.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for row in running:
            for number in range(WARM_UP):
                await request(session, row.url, 9000 + number)
        for number in range(requests):
            shift = number % len(running)
            for row in running[shift:] + running[:shift]:
                if row.failed:
                    continue
                try:
                    row.samples[number] = await request(session, row.url, number)
                except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
                    row.failed = f"request {number} failed: {exc or type(exc).__name__}"
            print(f"round {number + 1}/{requests} done", file=sys.stderr, flush=True)


def milliseconds(values: Sequence[float], fraction: float) -> float:
    """A percentile of ``values`` (seconds) in milliseconds."""
    return percentile(list(values), fraction) * 1000


def results_table(rows: list[Row]) -> list[str]:
    """Per configuration: TTFT median and p99, tokens/s median, ms per token, same tokens."""
    reference = rows[0].samples
    lines = [
        "| configuration | TTFT median ms | TTFT p99 ms | tokens/s median | ms per token "
        "| tokens as on 1 node |",
        "|---|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        if row.failed and not row.samples:
            lines.append(f"| {row.config.label} | {row.failed} | | | | |")
            continue
        samples = list(row.samples.values())
        first = [s.first_token_s for s in samples]
        rates = [1 / s.per_token_s for s in samples]
        per_token = median([s.per_token_s for s in samples]) * 1000
        same = text_check(reference, row.samples)
        lines.append(
            f"| {row.config.label} | {milliseconds(first, 0.5):.1f} | "
            f"{milliseconds(first, 0.99):.1f} | {median(rates):.0f} | {per_token:.2f} | {same} |"
        )
    return lines


def text_check(reference: dict[int, Sample], samples: dict[int, Sample]) -> str:
    """ "identical" (request by request, the same token ids as on one node, and the largest
    difference in their log-probabilities), or where the first different token lies."""
    largest = 0.0
    for number, sample in sorted(samples.items()):
        expected = reference.get(number)
        if expected is None:
            continue
        if sample.tokens != expected.tokens:
            pairs = zip(sample.tokens, expected.tokens, strict=False)
            at = next((i for i, (got, want) in enumerate(pairs) if got != want), 0)
            return (
                f"differs in request {number} from token {at}: "
                f"{list(expected.tokens[at : at + 4])} on 1 node, here "
                f"{list(sample.tokens[at : at + 4])}"
            )
        for got, want in zip(sample.logprobs, expected.logprobs, strict=True):
            largest = max(largest, abs(got - want))
    if not samples:
        return "-"
    return "identical" if largest == 0 else f"same tokens; log-probabilities within {largest:.1e}"


def tunnel_table(rows: list[Row]) -> list[str]:
    """Per network and node count: ms per token over plain TCP and through the tunnel."""
    found = {(r.config.network, r.config.nodes, r.config.carrier): r for r in rows if r.samples}
    lines = [
        "| network | nodes | ms per token, plain TCP | through the tunnel | tunnel adds per "
        "token | tunnel adds to TTFT |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for (kind, nodes, carrier), tunnel in found.items():
        plain = found.get((kind, nodes, "tcp"))
        if carrier != "tunnel" or plain is None:
            continue
        tcp_token = median([s.per_token_s for s in plain.samples.values()]) * 1000
        tunnel_token = median([s.per_token_s for s in tunnel.samples.values()]) * 1000
        tcp_first = median([s.first_token_s for s in plain.samples.values()]) * 1000
        tunnel_first = median([s.first_token_s for s in tunnel.samples.values()]) * 1000
        lines.append(
            f"| {kind} | {nodes} | {tcp_token:.2f} | {tunnel_token:.2f} | "
            f"{tunnel_token - tcp_token:+.2f} ms | {tunnel_first - tcp_first:+.1f} ms |"
        )
    return lines


def header(model: Path, requests: int, why_loopback: str | None) -> list[str]:
    """What was measured, on what."""
    plans = [plan_for(model, nodes) for nodes in (2, 3)]
    shares = "; ".join(
        f"{len(plan.shares)} nodes: layers {'/'.join(str(s.layers) for s in plan.shares)}, "
        f"--tensor-split {plan.tensor_split_arg()} -ngl {plan.gpu_layers}"
        for plan in plans
        if plan is not None
    )
    shape = MODEL_SHAPE
    where = "loopback and network namespaces" if why_loopback is None else "loopback only"
    lines = [
        f"model: {model.name} ({model.stat().st_size / 1e6:.1f} MB, {shape.block_count} blocks, "
        f"{shape.embedding_length} wide, feed-forward {shape.feed_forward_length}, F32)",
        f"split by PAIR's planner: {shares}",
        f"requests per configuration: {requests} (after {WARM_UP} warm-up), {MAX_TOKENS} tokens "
        f"each, temperature 0, seed {SEED}, one at a time; {os.cpu_count()} CPUs; {where}",
    ]
    if why_loopback is not None:
        lines.append(f"namespaces left out: {why_loopback}")
    return lines


async def launch_all(rig: Rig, rows: list[Row]) -> None:
    """Start every configuration; one that fails to start is reported, not fatal."""
    for row in rows:
        print(f"starting {row.config.label}", file=sys.stderr, flush=True)
        try:
            row.url = await rig.launch(row.config)
        except (RuntimeError, TimeoutError, OSError) as exc:
            row.failed = f"not started: {exc or type(exc).__name__}"


async def run(options: argparse.Namespace) -> list[str]:
    """Set everything up, measure, tear everything down; the report's lines."""
    found = binaries()
    if isinstance(found, str):
        raise SystemExit(f"bench/split.py needs llama.cpp built with RPC: {found}")
    model = split_model()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pair-bench-split-") as folder:
        work = Path(folder)
        processes = Processes(options.logs or work / "logs")
        await pair_nodes(work / "paired")
        async with network(loopback_only=options.loopback_only) as (places, why_loopback):
            loopback = {name: Place(None, "127.0.0.1") for name in places}
            spots: dict[NetworkKind, dict[str, Place]] = {"loopback": loopback}
            spots["namespaces"] = places
            rig = Rig(processes, work, model, *found, spots)
            rows = [Row(config) for config in configs(why_loopback is None)]
            try:
                await launch_all(rig, rows)
                began = time.monotonic()
                await measure(rows, options.requests)
                took = time.monotonic() - began
            finally:
                await processes.stop_all()
    load = f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    return [
        *header(model, options.requests, why_loopback),
        f"{load}; measuring took {took:.0f} s",
        "",
        *results_table(rows),
        "",
        *tunnel_table(rows),
        *(f"\n{row.config.label}: {row.failed}" for row in rows if row.failed),
    ]


async def main_task(options: argparse.Namespace) -> list[str]:
    """``run``, cancelled (so that everything is stopped) on SIGTERM as on Ctrl+C."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(options)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 requests per configuration")
    parser.add_argument("--requests", type=int, default=30, help="per configuration (30)")
    parser.add_argument("--logs", type=Path, help="keep every process's output in DIR")
    parser.add_argument("--loopback-only", action="store_true", help="no namespace rows")
    options = parser.parse_args(argv)
    if options.quick:
        options.requests = 5
    try:
        lines = asyncio.run(main_task(options))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("stopped; every process and namespace it made is gone", file=sys.stderr)
        return 130
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
