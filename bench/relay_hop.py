"""The cost of one hop between two nodes: plaintext (as before pairing) vs the mutual-TLS relay.

    .venv/bin/python bench/relay_hop.py [--quick] [--logs DIR]

Two PAIR proxies on loopback, each a real ``ProxyComponent`` with its own identity in a child
process (``_proxy_host.py``): node B serves the Ollama emulator (8 reply tokens 1 ms apart,
128 slots) as its local engine and trusts node A; node A's table names B as a paired peer
(B's relay port, B's pinned certificate). Non-streaming ``/api/generate`` from closed-loop
clients, at concurrency 1 and 16, a few hundred requests each (in four rounds taken in turn,
each after a warm-up), along:

- ``engine``: the emulator directly;
- ``B door``: B's front door serving it locally (the baseline every hop is measured against);
- ``plaintext hop``: a bare aiohttp pass-through, pooled plain HTTP, to B's front door, which
  is how a relayed request travelled before the relay got its own port (the plaintext relay
  is gone, so this stands in for it);
- ``mTLS hop, pooled``: the same pass-through speaking mutual TLS to B's relay port with a
  per-peer client context, keep-alive connections reused (what PAIR does);
- ``mTLS hop, fresh``: the same with a new connection and a full TLS 1.3 handshake per request
  (B issues no session tickets), to show what pooling saves;
- ``PAIR A -> B``: A's front door routing to B over its pooled mutual-TLS connections (A's
  routing, job events and the relay's started poll included).

The hop's added latency is each path minus ``B door``, per percentile (median and p99). The
load generator, both proxies, the pass-throughs and the emulator share this machine's cores;
treat differences of a fraction of a millisecond as noise. Progress goes to stderr, the table
to stdout. Every process it starts is stopped by PID. Not part of the pytest run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _common import Emulator, LoadResult, PassThrough, ProxyHost, median, percentile, run_load

from backend.protocol.proxy import ProxyTargets, RouteTarget

MODEL = "tinyllama:latest"
REPLY_TOKENS = 8
TOKEN_DELAY_S = 0.001
SLOTS = 128
PATH = "/api/generate"
BODY = {"model": MODEL, "prompt": "hi", "stream": False}
LEVELS = {1: 400, 16: 1600}
QUICK_DIVISOR = 4
# Each path's requests are split into rounds run in turn, so a slow spell of the machine (two
# cores shared by seven processes) lands on every path alike rather than on one.
ROUNDS = 4
NODE_A, NODE_B = "bench-a", "bench-b"


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def started(things: list[Emulator | ProxyHost | PassThrough]) -> Iterator[None]:
    """Stop everything in ``things`` (appended to while the block runs), last first."""
    try:
        yield
    finally:
        for thing in reversed(things):
            thing.stop()


def tables(emulator: Emulator, a: ProxyHost, b: ProxyHost, trusted: list[bytes]) -> None:
    """B serves the emulator and trusts ``trusted``; A routes to B as a paired peer."""
    local = RouteTarget(
        node_id=NODE_B, kind="local", base_url=emulator.url, models=[MODEL], slots=SLOTS
    )
    b.update(ProxyTargets(node_id=NODE_B, engines={"ollama": [local]}, trusted=trusted))
    peer = RouteTarget(
        node_id=NODE_B, kind="peer", base_url=b.relay_url, models=[MODEL], cert_der=b.cert_der
    )
    a.update(ProxyTargets(node_id=NODE_A, engines={"ollama": [peer]}))


def measure(base_url: str, concurrency: int, total: int) -> LoadResult:
    result = asyncio.run(
        run_load(
            f"{base_url}{PATH}",
            BODY,
            total=total,
            concurrency=concurrency,
            stream=False,
            warmup=max(concurrency, total // 10),
        )
    )
    if result.errors:
        progress(f"  {result.errors} failed requests to {base_url}, e.g. {result.error_sample}")
    return result


def merge(into: LoadResult, part: LoadResult) -> None:
    """Add one round's requests to a path's result (requests/s over the rounds' wall time)."""
    seconds = len(into.latencies) / into.rate if into.rate else 0.0
    seconds += len(part.latencies) / part.rate if part.rate else 0.0
    into.latencies += part.latencies
    into.errors += part.errors
    into.error_sample = into.error_sample or part.error_sample
    into.rate = len(into.latencies) / seconds if seconds else 0.0


def row(label: str, result: LoadResult, baseline: LoadResult | None) -> str:
    p50, p99 = median(result.latencies), percentile(result.latencies, 0.99)
    if baseline is None:
        added = "-", "-"
    else:
        base50, base99 = median(baseline.latencies), percentile(baseline.latencies, 0.99)
        added = f"{p50 - base50:+.2f}", f"{p99 - base99:+.2f}"
    return (
        f"| {label} | {p50:.2f} | {p99:.2f} | {added[0]} | {added[1]} | {result.rate:.0f} "
        f"| {result.errors} |"
    )


def run(args: argparse.Namespace, logs: Path) -> None:
    things: list[Emulator | ProxyHost | PassThrough] = []
    with started(things):
        progress("starting the emulator, two proxies and three pass-throughs")
        emulator = Emulator.fixed(
            model=MODEL,
            token_delay=TOKEN_DELAY_S,
            reply_tokens=REPLY_TOKENS,
            parallel=SLOTS,
            log_path=logs / "emulator.log",
        )
        things.append(emulator)
        b = ProxyHost(ProxyTargets(node_id=NODE_B), log_path=logs / "b.log", node_id=NODE_B)
        things.append(b)
        a = ProxyHost(ProxyTargets(node_id=NODE_A), log_path=logs / "a.log", node_id=NODE_A)
        things.append(a)
        relay_base = f"{b.relay_url}/_pair/relay/ollama"
        plain = PassThrough(b.doors["ollama"], log_path=logs / "plain.log")
        pooled = PassThrough(relay_base, pin=b.cert_der, log_path=logs / "pooled.log")
        fresh = PassThrough(relay_base, pin=b.cert_der, fresh=True, log_path=logs / "fresh.log")
        things += [plain, pooled, fresh]
        tables(emulator, a, b, [a.cert_der, pooled.cert_der, fresh.cert_der])
        paths = [
            ("engine", emulator.url),
            ("B door", b.doors["ollama"]),
            ("plaintext hop (bare pass-through) -> B door", plain.url),
            ("mTLS hop, pooled (bare pass-through) -> B relay", pooled.url),
            ("mTLS hop, fresh handshake per request -> B relay", fresh.url),
            ("PAIR: A door -> mTLS, pooled -> B relay", a.doors["ollama"]),
        ]
        for concurrency, full in LEVELS.items():
            total = max(concurrency, full // QUICK_DIVISOR) if args.quick else full
            results = {label: LoadResult() for label, _ in paths}
            for round_number in range(1, ROUNDS + 1):
                progress(f"c={concurrency}: round {round_number} of {ROUNDS}")
                for label, url in paths:
                    merge(results[label], measure(url, concurrency, total // ROUNDS))
            report(concurrency, total, results)


def report(concurrency: int, total: int, results: dict[str, LoadResult]) -> None:
    baseline = results["B door"]
    print(f"\n### c={concurrency}, {total} requests per path, `{PATH}` non-streaming\n")
    print("| path | p50 ms | p99 ms | hop p50 ms | hop p99 ms | req/s | errors |")
    print("|---|---|---|---|---|---|---|")
    for label, result in results.items():
        compared = None if label in ("engine", "B door") else baseline
        print(row(label, result, compared))
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(prog="relay_hop.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    parser.add_argument("--logs", type=Path, default=None, help="keep the processes' logs here")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"## One hop between two nodes ({platform.node()}, {os.cpu_count()} cores, "
        f"load {load[0]:.2f})\n\nhop = the path minus `B door` at the same percentile; "
        f"engine: Ollama emulator, {REPLY_TOKENS} tokens x {TOKEN_DELAY_S * 1000:g} ms."
    )
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        run(args, args.logs)
    else:
        with tempfile.TemporaryDirectory(prefix="pair-relay-bench-") as directory:
            run(args, Path(directory))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
