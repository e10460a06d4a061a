"""Round-trip latency of JSON-RPC calls to a real broker over its control socket.

    .venv/bin/python bench/rpc_roundtrip.py [--calls 5000] [--concurrency 1,16]

Starts a broker with a temporary data dir, measures ``ping`` and ``status``, prints medians and
p99 in microseconds, and stops the broker it started.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.protocol import contract, methods  # noqa: E402
from backend.protocol.contract import Method, NoParams  # noqa: E402
from backend.protocol.endpoint import control_address, open_control_connection  # noqa: E402
from backend.protocol.peer import RpcPeer  # noqa: E402


async def _measure(
    address: str, method: Method[NoParams, Any], calls: int, concurrency: int
) -> list[float]:
    reader, writer = await open_control_connection(address)
    peer = RpcPeer(reader, writer, name="bench")
    runner = asyncio.create_task(peer.run())
    samples: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            await contract.call(peer, method)
            samples.append((time.perf_counter() - started) * 1e6)

    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    peer.close()
    await runner
    return samples


def _report(label: str, samples: list[float], seconds: float) -> None:
    ordered = sorted(samples)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(
        f"{label:<28} n={len(samples):<6} p50={statistics.median(ordered):8.1f} us "
        f"p99={p99:8.1f} us  {len(samples) / seconds:9.0f} calls/s"
    )


async def _main(calls: int, levels: list[int], address: str) -> None:
    await _measure(address, methods.PING, 200, 1)  # warm up
    for method in (methods.PING, methods.STATUS):
        for concurrency in levels:
            started = time.perf_counter()
            samples = await _measure(address, method, calls, concurrency)
            _report(f"{method.name} c={concurrency}", samples, time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backend",
                "node",
                "--data-dir",
                data_dir,
                "--log-level",
                "warning",
                "--node-port",
                "1",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        try:
            address = control_address(Path(data_dir).resolve())
            deadline = time.monotonic() + 20
            while not Path(address).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            levels = [int(level) for level in args.concurrency.split(",")]
            asyncio.run(_main(args.calls, levels, address))
        finally:
            broker.terminate()
            broker.wait(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
