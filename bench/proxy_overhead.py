"""The front door's added latency: the same requests sent directly to an engine and through PAIR.

    .venv/bin/python bench/proxy_overhead.py [--requests 2000] [--concurrency 1,32,100]

Starts the Ollama emulator (fixed timing: no load delay, no per-token delay, 8-token replies)
and a broker that adopts it, then sends non-streaming ``/api/generate`` and streaming
``/api/chat`` requests to the engine directly and through the Ollama front door. Prints p50/p99
latency of both, their difference, time to first chunk, requests per second, the proxy's own
``X-PAIR-Proxy-Ms`` figure, and the proxy worker's RSS. Stops everything it started by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.protocol.endpoint import control_address, open_control_connection  # noqa: E402
from backend.protocol.peer import RpcPeer  # noqa: E402

MODEL = "tinyllama:latest"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def timed_requests(
    url: str, body: dict[str, object], total: int, concurrency: int, stream: bool
) -> tuple[list[float], list[float], list[float], float]:
    """Latencies (ms), first-chunk times (ms), X-PAIR-Proxy-Ms values, and requests/s."""
    latencies: list[float] = []
    first_chunks: list[float] = []
    proxy_ms: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            started = time.perf_counter()
            async with session.post(url, json=body) as response:
                first = None
                async for _ in response.content.iter_any():
                    first = first or time.perf_counter()
                done = time.perf_counter()
                if "X-PAIR-Proxy-Ms" in response.headers:
                    proxy_ms.append(float(response.headers["X-PAIR-Proxy-Ms"]))
            latencies.append((done - started) * 1000)
            if stream and first is not None:
                first_chunks.append((first - started) * 1000)

        async def worker(count: int) -> None:
            for _ in range(count):
                await one()

        begin = time.perf_counter()
        await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
        elapsed = time.perf_counter() - begin
    return latencies, first_chunks, proxy_ms, len(latencies) / elapsed


async def adopt_engine(data_dir: Path) -> None:
    reader, writer = await open_control_connection(control_address(data_dir))
    peer = RpcPeer(reader, writer, name="bench")
    runner = asyncio.create_task(peer.run())
    status = await peer.call("engine:start", {"engine": "ollama"}, timeout=60)
    assert status["adopted"], status
    for _ in range(100):  # the proxy learns its targets within a few seconds
        models = await peer.call("engine:models")
        if MODEL in models["by_engine"].get("ollama", []):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(3)
    peer.close()
    await runner


def report(label: str, direct: list[float], proxied: list[float]) -> None:
    d50, p50 = statistics.median(direct), statistics.median(proxied)
    d99, p99 = percentile(direct, 0.99), percentile(proxied, 0.99)
    print(
        f"{label:<34} direct p50 {d50:7.2f} p99 {d99:7.2f} | via PAIR p50 {p50:7.2f} "
        f"p99 {p99:7.2f} | added p50 {p50 - d50:6.2f} p99 {p99 - d99:6.2f} ms"
    )


async def run(args: argparse.Namespace, engine_port: int, door_port: int) -> None:
    generate = {"model": MODEL, "prompt": "hi", "stream": False}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for concurrency in [int(level) for level in args.concurrency.split(",")]:
        total = max(args.requests, concurrency)
        for path, body, stream in (("/api/generate", generate, False), ("/api/chat", chat, True)):
            direct = await timed_requests(
                f"http://127.0.0.1:{engine_port}{path}", body, total, concurrency, stream
            )
            proxied = await timed_requests(
                f"http://127.0.0.1:{door_port}{path}", body, total, concurrency, stream
            )
            report(f"{path} c={concurrency}", direct[0], proxied[0])
            if stream:
                report(f"  first chunk c={concurrency}", direct[1], proxied[1])
            print(
                f"{'':<34} direct {direct[3]:7.0f} req/s | via PAIR {proxied[3]:7.0f} req/s"
                f" | X-PAIR-Proxy-Ms p50 {statistics.median(proxied[2]):.2f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,32,100")
    args = parser.parse_args()
    engine_port, door_port = free_port(), free_port()
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as temp:
        data_dir = Path(temp).resolve()
        (data_dir / "engines").mkdir()
        (data_dir / "engines" / "ollama.json").write_text(
            json.dumps({"detect": [], "runtime": {"port": engine_port}})
        )
        try:
            started.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "backend",
                        "emulate",
                        "ollama",
                        "--port",
                        str(engine_port),
                        "--models",
                        MODEL,
                        "--load-delay",
                        "0",
                        "--token-delay",
                        "0",
                        "--reply-tokens",
                        "8",
                        "--parallel",
                        "128",
                    ],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            started.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "backend",
                        "node",
                        "--data-dir",
                        str(data_dir),
                        "--log-level",
                        "warning",
                        "--node-port",
                        str(free_port()),
                        "--ollama-port",
                        str(door_port),
                        "--openai-port",
                        str(free_port()),
                        "--llamacpp-port",
                        str(free_port()),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    env={**os.environ, "PAIR_DISCOVERY_MDNS": "0"},
                )
            )
            time.sleep(3)
            asyncio.run(adopt_engine(data_dir))
            asyncio.run(run(args, engine_port, door_port))
            broker = psutil.Process(started[1].pid)
            for child in broker.children(recursive=True):
                if "backend.workers.proxy" in " ".join(child.cmdline()):
                    print(
                        f"proxy worker RSS after the run: {child.memory_info().rss / 2**20:.1f} MB"
                    )
        finally:
            for process in reversed(started):
                process.terminate()
                process.wait(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
