"""PAIR's proxy worker in variants that differ only in their environment, against the bare
pass-through, in one run: what one switch changes (the event loop, the collector's threshold,
the CPU policy).

    .venv/bin/python bench/worker_variants.py [--kind JSON|stream] [--level C] [--requests N]
        [--rounds R] [--tokens T] VARIANT [VARIANT ...]

VARIANT is ``NAME`` (the worker as it ships) or ``NAME:KEY=VALUE[,KEY=VALUE...]`` (that
environment added), e.g. ``shipped gen0-700:PAIR_GC_GEN0=700 asyncio:PAIR_EVENT_LOOP=asyncio
normal:PAIR_CPU_POLICY=normal``.
Each variant is a proxy worker of its own (``_proxy_host.py``), all in front of one Ollama
emulator (``--tokens`` reply tokens 1 ms apart, 128 slots) beside the bare pass-through
(``_pass_through.py``) and the emulator itself. After a warm-up of each, ``--rounds`` rounds
of ``--requests`` requests per path at concurrency ``--level``, every other round in reverse
order. Per path: the CPU time its process spent per request (the median round, and the range
over rounds), how often per request it slept and was woken (voluntary context switches) and
how often the emulator was preempted (involuntary ones) while that path ran, the added latency
p50 and p99 over the direct calls (pooled), and requests/s.

On this 2-core machine one path's rounds have ranged over 30-40 % of their median in a
six-round run: read a difference between variants smaller than their ranges as none. Not run
by pytest; every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    Emulator,
    LoadResult,
    PassThrough,
    ProxyHost,
    emulator_kinds,
    percentile,
    run_load,
    switches,
)

from backend.protocol.proxy import ProxyTargets, RouteTarget

NODE_ID = "bench-node"
MODEL = "tinyllama:latest"
SLOTS = 128
WARMUP = 300
KINDS = emulator_kinds(MODEL)


@dataclass
class Route:
    """One path the requests take, and what was measured on it."""

    name: str
    url: str
    pid: int | None
    cpu_ms: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    wakeups: list[float] = field(default_factory=list)  # the path's process, per request
    preempted: list[float] = field(default_factory=list)  # the engine, per request

    def add(self, result: LoadResult, wakeups: int, preempted: int) -> None:
        count = len(result.latencies)
        self.cpu_ms.append(result.cpu_s * 1000 / count if count else float("nan"))
        self.wakeups.append(wakeups / count if count else float("nan"))
        self.preempted.append(preempted / count if count else float("nan"))
        self.latencies += result.latencies
        self.rates.append(result.rate)


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME:KEY=VALUE,...`` as the name and its environment."""
    name, _, assignments = text.partition(":")
    env: dict[str, str] = {}
    for assignment in filter(None, assignments.split(",")):
        key, equals, value = assignment.partition("=")
        if not equals or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE in {text!r}, got {assignment!r}")
        env[key] = value
    if not name:
        raise argparse.ArgumentTypeError(f"a variant needs a name: {text!r}")
    return name, env


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("variants", nargs="+", type=parse_variant, metavar="VARIANT")
    parser.add_argument("--kind", choices=sorted(KINDS), default="JSON")
    parser.add_argument("--level", type=int, default=32, help="concurrency")
    parser.add_argument("--requests", type=int, default=2000, help="per path and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=8, help="reply tokens, 1 ms apart")
    args = parser.parse_args()
    url_path, body = KINDS[args.kind]
    stream = args.kind == "stream"
    paths: list[Route] = []
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pair-variants-")))
        emulator = Emulator.fixed(
            model=MODEL,
            token_delay=0.001,
            reply_tokens=args.tokens,
            parallel=SLOTS,
            log_path=logs / "emulator.log",
        )
        stack.callback(emulator.stop)
        bare = PassThrough(emulator.url, log_path=logs / "bare.log")
        stack.callback(bare.stop)
        paths += [Route("direct", emulator.url, None), Route("bare", bare.url, bare.process.pid)]
        target = RouteTarget(
            node_id=NODE_ID, kind="local", base_url=emulator.url, models=[MODEL], slots=SLOTS
        )
        table = ProxyTargets(node_id=NODE_ID, engines={"ollama": [target]})
        for name, env in args.variants:
            host = ProxyHost(table, log_path=logs / f"proxy-{name}.log", env=env)
            stack.callback(host.stop)
            paths.append(Route(f"PAIR {name}", host.doors["ollama"], host.worker_pid))

        def load(path: Route, total: int) -> LoadResult:
            return asyncio.run(
                run_load(
                    path.url + url_path,
                    body,
                    total=total,
                    concurrency=args.level,
                    stream=stream,
                    cpu_pid=path.pid,
                )
            )

        for path in paths:
            load(path, WARMUP)
        engine_pid = emulator.process.pid
        for round_index in range(args.rounds):
            for path in paths if round_index % 2 == 0 else paths[::-1]:
                (woken, _), (_, preempted) = switches(path.pid), switches(engine_pid)
                result = load(path, args.requests)
                (woken_after, _), (_, preempted_after) = switches(path.pid), switches(engine_pid)
                path.add(result, woken_after - woken, preempted_after - preempted)
            print(f"round {round_index + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    report(paths, args)
    return 0


def report(paths: list[Route], args: argparse.Namespace) -> None:
    direct = paths[0]
    print(
        f"{args.kind} at c={args.level}, {args.tokens} tokens per reply, {args.rounds} rounds of "
        f"{args.requests} requests per path:\n"
    )
    print(
        "| path | CPU ms/request (median; range) | wake-ups/request | engine preempted/request "
        "| added p50 | added p99 | req/s |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|")
    for path in paths:
        cpu = woken = "-"
        if path.pid is not None:
            cpu = (
                f"{statistics.median(path.cpu_ms):.3f} "
                f"({min(path.cpu_ms):.3f}-{max(path.cpu_ms):.3f})"
            )
            woken = f"{statistics.median(path.wakeups):.2f}"
        added = [
            percentile(path.latencies, q) - percentile(direct.latencies, q) for q in (0.5, 0.99)
        ]
        print(
            f"| {path.name} | {cpu} | {woken} | {statistics.median(path.preempted):.2f} "
            f"| {added[0]:.2f} | {added[1]:.2f} | {statistics.median(path.rates):.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
