"""What the RPC tunnel adds per message: round trips through it vs plain TCP, on loopback.

    .venv/bin/python bench/split_tunnel.py [--round-trips 2000]

Two paired nodes in this process (real pairing, real mutual TLS; the unit tests' harness): B
serves ``/v1/cluster/rpc-tunnel`` leading to an echo server that stands in for ``rpc-server``,
A holds the ``TunnelListener`` that ``llama-server --rpc`` would dial. One connection each way,
one message at a time (llama.cpp's RPC waits for every answer): 1-byte and 4 KB messages, plain
TCP to the echo server and through the tunnel, in alternating rounds. Prints median and p99 in
microseconds and the tunnel's added median per round trip. Both ends share one process and one
event loop here, so the figures include both nodes' work on the same core.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.unit.split.tunnel_harness import Tunnels, tunnels  # noqa: E402

SIZES = (1, 4096)
ROUNDS = 4
WARM_UP = 50

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _round_trips(stream: Stream, size: int, count: int) -> list[float]:
    """``count`` round trips of ``size`` bytes, one at a time, in microseconds each."""
    reader, writer = stream
    message = b"x" * size
    times: list[float] = []
    for _ in range(count):
        start = time.perf_counter_ns()
        writer.write(message)
        await reader.readexactly(size)
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


async def _measure(made: Tunnels, echo_port: int, count: int) -> dict[tuple[str, int], list[float]]:
    plain = await asyncio.open_connection("127.0.0.1", echo_port)
    through = await asyncio.open_connection("127.0.0.1", made.listener.port)
    paths = {"plain TCP": plain, "tunnel": through}
    for stream in paths.values():
        await _round_trips(stream, 4096, WARM_UP)
    results: dict[tuple[str, int], list[float]] = {}
    for round_number in range(ROUNDS):
        order = list(paths.items()) if round_number % 2 == 0 else list(reversed(paths.items()))
        for size in SIZES:
            for name, stream in order:
                times = await _round_trips(stream, size, count // ROUNDS)
                results.setdefault((name, size), []).extend(times)
    for _, writer in paths.values():
        writer.close()
    return results


async def _main(count: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pair-bench-tunnel-") as root:
        async with tunnels(Path(root)) as made:
            results = await _measure(made, made.rpc_server.port, count)
    print(f"round trips per row: {count}, one at a time, loopback, one process\n")
    print("| path | message | median µs | p99 µs |")
    print("|---|---|---|---|")
    for (name, size), times in results.items():
        label = "1 B" if size == 1 else f"{size // 1024} KB"
        print(f"| {name} | {label} | {statistics.median(times):.0f} | {_p99(times):.0f} |")
    print()
    for size in SIZES:
        added = statistics.median(results[("tunnel", size)]) - statistics.median(
            results[("plain TCP", size)]
        )
        print(f"tunnel adds {added:.0f} µs per round trip of {size} B (median)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round-trips", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(_main(args.round_trips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
