"""The front door's cost: the same requests sent to an engine directly and through PAIR's proxy.

    .venv/bin/python bench/front_door.py [--quick] [--skip-llama-server] [--logs DIR]

Two engines on loopback: the Ollama emulator with fixed timing (no load delay, 8 reply tokens
1 ms apart, 128 slots) and a real ``llama-server`` with the generated tiny model (8 tokens per
reply, one compute thread, restarted for each concurrency level with ``-np`` equal to it).
PAIR's real proxy worker runs under a ``ProxyComponent`` hosted in a child process
(``_proxy_host.py``, as the broker hosts it), with a routing table that names both engines as
this node's targets with those slot counts.

For each engine and concurrency 1, 32 and 100 (closed-loop clients, non-streaming requests:
``/api/generate`` on the emulator, ``/v1/chat/completions`` on llama-server), one markdown
table row: latency p50/p99 direct and via PAIR, the added latency (via minus direct, per
percentile), and requests/s of both. A second table has, per engine: the first-chunk overhead
of streaming requests at c=1; the added per-chunk delay (inter-chunk gaps via PAIR minus direct,
per percentile); requests/s at c=32 direct, via PAIR, and via PAIR with the proxy worker pinned
to one core (all its threads, ``os.sched_setaffinity``; client and engine unpinned); the
worker's CPU time per request; and its RSS idle after start and at the peak of the c=100 runs.

llama-server closes its connection after every streamed response without saying so, so its
streamed runs open one client connection per request, direct and via PAIR alike.

The load generator, the engines and the proxy share this machine's cores, and the direct and
proxied runs follow each other rather than run together: on a busy machine (see the load
average in the header) treat differences of a few ms as noise. Progress goes to stderr, the
tables to stdout. Every process it starts is stopped by PID. Not part of the pytest run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    Emulator,
    LoadResult,
    ProxyHost,
    RssSampler,
    median,
    percentile,
    pinned,
    run_load,
    worker_rss,
)

from backend.devtools.llama_server import search_llama_server
from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.engines.fixtures import (
    LlamaServer,
    cached_model,
    launch_llama_server,
    stop_llama_server,
    wait_until_healthy,
)

NODE_ID = "bench-node"
LEVELS = (1, 32, 100)
PIN_LEVEL = 32
REPLY_TOKENS = 8
EMULATOR_MODEL = "tinyllama:latest"
EMULATOR_TOKEN_DELAY_S = 0.001
EMULATOR_SLOTS = 128
LLAMA_MODEL = "tiny"
LLAMA_CONTEXT_PER_SLOT = 256
# One compute thread: with its default (one per core) llama-server's spinning threads fight the
# client and the proxy for the two cores here, and serve 2-4 times fewer requests per second.
LLAMA_THREADS = 1
# Measured requests per run: non-streaming per level, and streaming at c=1 (--quick: a quarter).
EMULATOR_REQUESTS = {1: 400, 32: 2000, 100: 3000}
LLAMA_REQUESTS = {1: 400, 32: 800, 100: 1000}  # llama-server at -np 100 is slower
STREAM_REQUESTS = 400
QUICK_DIVISOR = 4


@dataclass(frozen=True)
class Backend:
    """One engine as the benchmark sees it: its label, front door, paths and request bodies.

    ``stream_closes``: the engine closes its connection after each streamed response without
    saying so (llama-server does), so streamed runs open a new connection per request (direct
    and via PAIR alike) instead of racing that close on a pooled one.
    """

    label: str
    engine: str
    door: str
    plain_path: str
    plain_body: dict[str, Any]
    stream_path: str
    stream_body: dict[str, Any]
    requests: dict[int, int]
    stream_closes: bool = False

    def total(self, level: int, quick: bool) -> int:
        """Measured requests at concurrency ``level`` (0: the streamed run at c=1)."""
        full = self.requests[level] if level else STREAM_REQUESTS
        return max(level, full // QUICK_DIVISOR) if quick else full


EMULATOR = Backend(
    label=f"Ollama emulator ({REPLY_TOKENS} tok x {EMULATOR_TOKEN_DELAY_S * 1000:g} ms)",
    engine="ollama",
    door="ollama",
    plain_path="/api/generate",
    plain_body={"model": EMULATOR_MODEL, "prompt": "hi", "stream": False},
    stream_path="/api/chat",
    stream_body={
        "model": EMULATOR_MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    },
    requests=EMULATOR_REQUESTS,
)
_CHAT = {"model": LLAMA_MODEL, "messages": [{"role": "user", "content": "hi"}]}
LLAMA = Backend(
    label=f"llama-server (tiny model, {REPLY_TOKENS} tok, -np = c)",
    engine="llamacpp",
    door="llamacpp",
    plain_path="/v1/chat/completions",
    plain_body={**_CHAT, "max_tokens": REPLY_TOKENS, "stream": False},
    stream_path="/v1/chat/completions",
    stream_body={**_CHAT, "max_tokens": REPLY_TOKENS, "stream": True},
    requests=LLAMA_REQUESTS,
    stream_closes=True,
)


@dataclass
class Pair:
    """The same load sent directly and through PAIR."""

    direct: LoadResult
    via: LoadResult


@dataclass
class Findings:
    """Everything measured for one backend."""

    backend: Backend
    levels: dict[int, Pair] = field(default_factory=dict)
    stream: Pair | None = None
    pinned: LoadResult | None = None
    rss_peak: int = 0


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Runner:
    """Runs loads against one backend: directly at ``engine_url`` or through ``proxy``."""

    backend: Backend
    engine_url: str
    proxy: ProxyHost

    def load(
        self, base_url: str, concurrency: int, total: int, *, stream: bool = False
    ) -> LoadResult:
        """One measured run (after a warm-up on the same connections)."""
        backend = self.backend
        path, body = (
            (backend.stream_path, backend.stream_body)
            if stream
            else (backend.plain_path, backend.plain_body)
        )
        url = f"{base_url}{path}"
        result = asyncio.run(
            run_load(
                url,
                body,
                total=total,
                concurrency=concurrency,
                stream=stream,
                warmup=max(concurrency, total // 10),
                fresh_connections=stream and backend.stream_closes,
                cpu_pid=self.proxy.worker_pid,
            )
        )
        if result.errors:
            progress(f"  {result.errors} failed requests to {url}, e.g. {result.error_sample}")
        return result

    def compare(self, concurrency: int, total: int, *, stream: bool = False) -> Pair:
        """The same load directly, then through the front door."""
        direct = self.load(self.engine_url, concurrency, total, stream=stream)
        via = self.load(self.door_url, concurrency, total, stream=stream)
        progress(
            f"{self.backend.engine} {'stream' if stream else 'plain'} c={concurrency}: "
            f"direct p50 {median(direct.latencies):.2f} ms {direct.rate:.0f}/s | "
            f"via PAIR p50 {median(via.latencies):.2f} ms {via.rate:.0f}/s, "
            f"worker CPU {cpu_per_request(via):.3f} ms/request"
        )
        return Pair(direct, via)

    @property
    def door_url(self) -> str:
        return self.proxy.doors[self.backend.door]


def cpu_per_request(result: LoadResult) -> float:
    """Proxy worker CPU milliseconds per measured request."""
    return result.cpu_s * 1000 / len(result.latencies) if result.latencies else math.nan


EngineAt = Callable[[int], contextlib.AbstractContextManager[str]]


def bench_backend(
    backend: Backend, engine_at: EngineAt, proxy: ProxyHost, *, quick: bool, cpu: set[int]
) -> Findings:
    """All runs for one backend; ``engine_at(c)`` provides the engine URL sized for ``c``."""
    findings = Findings(backend)
    for level in LEVELS:
        total = backend.total(level, quick)
        with engine_at(level) as engine_url:
            runner = Runner(backend, engine_url, proxy)
            if level == max(LEVELS):
                with RssSampler(proxy.worker_pid) as sampler:
                    findings.levels[level] = runner.compare(level, total)
                findings.rss_peak = sampler.peak
            else:
                findings.levels[level] = runner.compare(level, total)
            if level == 1:
                findings.stream = runner.compare(1, backend.total(0, quick), stream=True)
            if level == PIN_LEVEL:
                with pinned(proxy.worker_pid, cpu):
                    findings.pinned = runner.load(runner.door_url, level, total)
                progress(
                    f"{backend.engine} plain c={level}, worker pinned to CPU {sorted(cpu)}: "
                    f"{findings.pinned.rate:.0f}/s, "
                    f"worker CPU {cpu_per_request(findings.pinned):.3f} ms/request"
                )
    return findings


def local_target(url: str, models: list[str], slots: int) -> RouteTarget:
    """This node's own engine, as the routing table names it."""
    return RouteTarget(node_id=NODE_ID, kind="local", base_url=url, models=models, slots=slots)


def routing(**engines: RouteTarget) -> ProxyTargets:
    """A table with one local target per engine."""
    return ProxyTargets(node_id=NODE_ID, engines={name: [t] for name, t in engines.items()})


# --- the report -----------------------------------------------------------------------------


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def added(via: list[float], direct: list[float], fraction: float) -> str:
    return ms(percentile(via, fraction) - percentile(direct, fraction))


def main_table(all_findings: list[Findings]) -> list[str]:
    lines = [
        "| backend | c | n | direct p50 | direct p99 | via PAIR p50 | via PAIR p99 "
        "| added p50 | added p99 | req/s direct | req/s via PAIR |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for findings in all_findings:
        for level, pair in findings.levels.items():
            d, v = pair.direct.latencies, pair.via.latencies
            lines.append(
                f"| {findings.backend.label} | {level} | {len(v)} "
                f"| {ms(percentile(d, 0.5))} | {ms(percentile(d, 0.99))} "
                f"| {ms(percentile(v, 0.5))} | {ms(percentile(v, 0.99))} "
                f"| {added(v, d, 0.5)} | {added(v, d, 0.99)} "
                f"| {pair.direct.rate:.0f} | {pair.via.rate:.0f} |"
            )
    return lines


def extras_table(all_findings: list[Findings], idle_rss: int, cpu: set[int]) -> list[str]:
    lines = [
        "| backend | first-chunk added p50 / p99 (c=1, stream) "
        "| per-chunk added p50 / p99 (gap via - direct) "
        f"| req/s c={PIN_LEVEL}: direct / via PAIR / via PAIR, worker pinned to CPU "
        f"{','.join(map(str, sorted(cpu)))} "
        f"| worker CPU per request via PAIR (c={PIN_LEVEL}) "
        f"| worker RSS idle / peak at c={max(LEVELS)} |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for findings in all_findings:
        stream, plain = findings.stream, findings.levels.get(PIN_LEVEL)
        first = chunk = rates = cpu_cost = "n/a"
        if stream is not None:
            d, v = stream.direct.first_chunks, stream.via.first_chunks
            first = f"{added(v, d, 0.5)} / {added(v, d, 0.99)} ms"
            gd, gv = stream.direct.gaps, stream.via.gaps
            chunk = f"{added(gv, gd, 0.5)} / {added(gv, gd, 0.99)} ms"
        if plain is not None and findings.pinned is not None:
            rates = f"{plain.direct.rate:.0f} / {plain.via.rate:.0f} / {findings.pinned.rate:.0f}"
            per_request = cpu_per_request(plain.via)
            cpu_cost = f"{per_request:.3f} ms (= {1000 / per_request:.0f} req/s per busy core)"
        lines.append(
            f"| {findings.backend.label} | {first} | {chunk} | {rates} | {cpu_cost} "
            f"| {idle_rss / 2**20:.1f} / {findings.rss_peak / 2**20:.1f} MB |"
        )
    return lines


def stream_detail(all_findings: list[Findings]) -> list[str]:
    lines = []
    for findings in all_findings:
        if findings.stream is None:
            continue
        d, v = findings.stream.direct, findings.stream.via
        lines.append(
            f"- {findings.backend.label}, stream c=1: first chunk direct "
            f"{ms(percentile(d.first_chunks, 0.5))} / {ms(percentile(d.first_chunks, 0.99))} ms, "
            f"via PAIR {ms(percentile(v.first_chunks, 0.5))} / "
            f"{ms(percentile(v.first_chunks, 0.99))} ms; inter-chunk gap direct "
            f"{ms(percentile(d.gaps, 0.5))} / {ms(percentile(d.gaps, 0.99))} ms, via PAIR "
            f"{ms(percentile(v.gaps, 0.5))} / {ms(percentile(v.gaps, 0.99))} ms "
            f"({d.chunks} / {v.chunks} chunks); slowest request direct "
            f"{ms(max(d.latencies, default=math.nan))} ms, via PAIR "
            f"{ms(max(v.latencies, default=math.nan))} ms"
        )
    return lines


# --- orchestration --------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="about a quarter of the requests")
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument(
        "--logs", type=Path, help="keep the engines' and the proxy's logs here (default: discard)"
    )
    args = parser.parse_args()
    cpu = {min(os.sched_getaffinity(0))}
    began = time.monotonic()
    load_before = os.getloadavg()[0]
    all_findings: list[Findings] = []
    with contextlib.ExitStack() as stack:
        logs: Path = args.logs or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="pair-bench-"))
        )
        logs.mkdir(parents=True, exist_ok=True)
        progress("starting the Ollama emulator and the proxy")
        emulator = Emulator.fixed(
            model=EMULATOR_MODEL,
            token_delay=EMULATOR_TOKEN_DELAY_S,
            reply_tokens=REPLY_TOKENS,
            parallel=EMULATOR_SLOTS,
            log_path=logs / "emulator.log",
        )
        emulator_target = local_target(emulator.url, [EMULATOR_MODEL], EMULATOR_SLOTS)
        try:
            proxy = ProxyHost(routing(ollama=emulator_target), log_path=logs / "proxy.log")
            try:
                time.sleep(1.0)
                idle_rss = worker_rss(proxy.worker_pid)
                progress(f"proxy worker pid {proxy.worker_pid}, idle RSS {idle_rss / 2**20:.1f} MB")

                @contextlib.contextmanager
                def emulator_at(_: int) -> Iterator[str]:
                    yield emulator.url

                all_findings.append(
                    bench_backend(EMULATOR, emulator_at, proxy, quick=args.quick, cpu=cpu)
                )
                if not args.skip_llama_server:
                    llama = bench_llama_server(proxy, emulator_target, logs, args.quick, cpu)
                    if llama is not None:
                        all_findings.append(llama)
            finally:
                proxy.stop()
        finally:
            emulator.stop()
    seconds = time.monotonic() - began
    report(all_findings, idle_rss, cpu, quick=args.quick, seconds=seconds, load_before=load_before)
    return 0


def bench_llama_server(
    proxy: ProxyHost, emulator_target: RouteTarget, logs: Path, quick: bool, cpu: set[int]
) -> Findings | None:
    """The llama-server runs, or None (with the reason on stderr) when it is not installed."""
    search = search_llama_server()
    if search.binary is None:
        progress(f"llama-server rows skipped: {search.reason}")
        return None
    binary = search.binary
    model = cached_model("tiny")

    @contextlib.contextmanager
    def llama_at(slots: int) -> Iterator[str]:
        server = start_llama_server(binary, model, slots, logs / f"llama-server-np{slots}.log")
        try:
            target = local_target(server.base_url, [LLAMA_MODEL], slots)
            proxy.update(routing(ollama=emulator_target, llamacpp=target))
            yield server.base_url
        finally:
            stop_llama_server(server)

    return bench_backend(LLAMA, llama_at, proxy, quick=quick, cpu=cpu)


def start_llama_server(binary: Path, model: Path, slots: int, log_path: Path) -> LlamaServer:
    """A healthy llama-server with ``slots`` slots on a free port (retried if the port is lost)."""
    for _attempt in range(3):
        server = launch_llama_server(
            binary,
            model,
            parallel=slots,
            context=LLAMA_CONTEXT_PER_SLOT * slots,
            extra_args=("--alias", LLAMA_MODEL, "--threads", str(LLAMA_THREADS)),
            log_path=log_path,
        )
        if wait_until_healthy(server):
            return server
        stop_llama_server(server)
        if "couldn't bind" not in server.log_tail():
            break
    raise RuntimeError(f"llama-server did not start:\n{server.log_tail()}")


def report(
    all_findings: list[Findings],
    idle_rss: int,
    cpu: set[int],
    *,
    quick: bool,
    seconds: float,
    load_before: float,
) -> None:
    print(
        f"Front door vs direct: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after, {seconds:.0f} s{' (--quick)' if quick else ''}. "
        "Latencies in ms, closed-loop clients, non-streaming requests; "
        "added = via PAIR - direct, per percentile; n = measured requests per side."
    )
    print()
    print("\n".join(main_table(all_findings)))
    print()
    print("\n".join(extras_table(all_findings, idle_rss, cpu)))
    print()
    print("\n".join(stream_detail(all_findings)))
    results = [
        result
        for findings in all_findings
        for pair in [*findings.levels.values(), *([findings.stream] if findings.stream else [])]
        for result in (pair.direct, pair.via)
    ] + [findings.pinned for findings in all_findings if findings.pinned is not None]
    failures = sum(result.errors for result in results)
    if failures:
        print(f"\n{failures} requests failed (see stderr); they are not in the figures.")


if __name__ == "__main__":
    sys.exit(main())
