"""Streamed chunks per second through the front door vs straight from the engine.

    .venv/bin/python bench/stream_chunks.py [--tokens 20000] [--streams 4]

The Ollama emulator streams ``--tokens`` NDJSON lines per request with no delay between them;
``--streams`` requests run at once. Prints chunks/s seen by the client, direct and via PAIR,
and the proxy worker's CPU time per chunk (so chunks/s per busy core = 1 / that).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.protocol.proxy import ProxyTargets, RouteTarget  # noqa: E402
from bench._common import Emulator, ProxyHost, cpu_seconds  # noqa: E402

MODEL = "bench:latest"


async def _stream(session: aiohttp.ClientSession, base_url: str, tokens: int) -> int:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "go"}],
        "options": {"num_predict": tokens},
    }
    chunks = 0
    async with session.post(f"{base_url}/api/chat", json=body) as response:
        response.raise_for_status()
        async for _ in response.content:
            chunks += 1
    return chunks


async def _measure(base_url: str, tokens: int, streams: int) -> tuple[int, float]:
    async with aiohttp.ClientSession() as session:
        await _stream(session, base_url, 10)  # warm up: load the model, open connections
        started = time.perf_counter()
        counts = await asyncio.gather(*(_stream(session, base_url, tokens) for _ in range(streams)))
        return sum(counts), time.perf_counter() - started


def main() -> int:
    """Run both measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=20000)
    parser.add_argument("--streams", type=int, default=4)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pair-bench-") as folder:
        logs = Path(folder)
        emulator = Emulator.fixed(
            model=MODEL,
            token_delay=0.0,
            reply_tokens=arguments.tokens,
            parallel=arguments.streams,
            log_path=logs / "emulator.log",
        )
        try:
            target = RouteTarget(
                node_id="bench",
                kind="local",
                base_url=emulator.url,
                models=[MODEL],
                slots=arguments.streams,
            )
            proxy = ProxyHost(
                ProxyTargets(node_id="bench", engines={"ollama": [target]}),
                log_path=logs / "proxy.log",
            )
            try:
                direct, direct_s = asyncio.run(
                    _measure(emulator.url, arguments.tokens, arguments.streams)
                )
                cpu_before = cpu_seconds(proxy.worker_pid)
                via, via_s = asyncio.run(
                    _measure(proxy.doors["ollama"], arguments.tokens, arguments.streams)
                )
                cpu_used = cpu_seconds(proxy.worker_pid) - cpu_before
            finally:
                proxy.stop()
        finally:
            emulator.stop()
    per_chunk_us = cpu_used / max(via, 1) * 1e6
    print(f"{arguments.streams} streams x {arguments.tokens} chunks, emulator with no delay")
    print(f"direct:   {direct / direct_s:,.0f} chunks/s ({direct} chunks in {direct_s:.2f} s)")
    print(f"via PAIR: {via / via_s:,.0f} chunks/s ({via} chunks in {via_s:.2f} s)")
    print(
        f"proxy worker CPU {per_chunk_us:.1f} µs/chunk = {1e6 / per_chunk_us:,.0f} chunks/s "
        "per busy core"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
