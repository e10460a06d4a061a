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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import ROOT, free_port, percentile, run_load

from backend.protocol import contract, methods
from backend.protocol.endpoint import control_address, open_control_connection
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineRef

MODEL = "tinyllama:latest"


async def adopt_engine(data_dir: Path) -> None:
    reader, writer = await open_control_connection(control_address(data_dir))
    peer = RpcPeer(reader, writer, name="bench")
    runner = asyncio.create_task(peer.run())
    ollama = EngineName("ollama")
    status = await contract.call(peer, methods.ENGINE_START, EngineRef(engine=ollama), timeout=60)
    assert status.adopted, status
    for _ in range(100):  # the proxy learns its targets within a few seconds
        models = await contract.call(peer, methods.ENGINE_MODELS)
        if MODEL in models.by_engine.get(ollama, []):
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
            direct, proxied = [
                await run_load(
                    f"http://127.0.0.1:{port}{path}",
                    body,
                    total=total,
                    concurrency=concurrency,
                    stream=stream,
                    warmup=concurrency,
                )
                for port in (engine_port, door_port)
            ]
            report(f"{path} c={concurrency}", direct.latencies, proxied.latencies)
            if stream:
                report(f"  first chunk c={concurrency}", direct.first_chunks, proxied.first_chunks)
            header = f"{statistics.median(proxied.proxy_ms):.2f}" if proxied.proxy_ms else "n/a"
            print(
                f"{'':<34} direct {direct.rate:7.0f} req/s | via PAIR {proxied.rate:7.0f} req/s"
                f" | X-PAIR-Proxy-Ms p50 {header}"
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
                        "--relay-port",
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
