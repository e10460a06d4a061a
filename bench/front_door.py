"""The front door's cost, calibrated: the same requests to an engine directly, through a bare
aiohttp pass-through, and through PAIR's proxy, in one run.

    .venv/bin/python bench/front_door.py [--quick] [--skip-llama-server] [--logs DIR] [--twin]

Two engines on loopback: the Ollama emulator with fixed timing (no load delay, 8 reply tokens
1 ms apart, 128 slots) and a real ``llama-server`` with the generated tiny model (8 tokens per
reply, one compute thread, restarted for each concurrency level with ``-np`` equal to it).
Three paths to each, in the same process layout (client -> one process on loopback -> engine):

- ``direct``: the engine itself;
- ``bare``: a bare aiohttp pass-through (``_pass_through.py``, a child process: one pooled
  client session with ``limit=0``, body read whole, the answer streamed back chunk by chunk with
  ``iter_any()``, one retry on a pooled connection the engine had closed, as PAIR does), started
  afresh per concurrency level; the calibration point: what any Python proxy in front costs;
- ``PAIR``: PAIR's real proxy worker under a ``ProxyComponent`` hosted in a child process
  (``_proxy_host.py``, as the broker hosts it), with a routing table that names both engines as
  this node's targets with those slot counts.

Two request kinds: JSON (``stream: false``: ``/api/generate`` on the emulator,
``/v1/chat/completions`` on llama-server) and streams (NDJSON ``/api/chat`` on the emulator,
SSE ``/v1/chat/completions`` on llama-server). For each engine, kind and concurrency 1, 32 and
100 (closed-loop clients), one row of the main table: the latency p50/p99 direct, the added
latency (path minus direct, per percentile) of the bare pass-through and of PAIR, the ratio
PAIR/bare of those (the issue's target is at most 1.5: a ratio over it is bold and the last
column names it; n/a when the bare pass-through added nothing measurable, i.e. <= 0), and
requests/s of the three paths. Each row is measured in six rounds of a sixth of the requests,
the three runs of a round back to back and every other round in reverse order (direct, bare,
PAIR, then PAIR, bare, direct), pooled: each path sees the same machine state on average and a
drift in the background load cancels out (with two rounds, the added milliseconds of one row
swung between runs by more than the difference measured). Every run has its own warm-up on its
own connections. Each ratio also has an interval: the rounds are drawn again with replacement
(a round's three runs together) 400 times and the ratio recomputed; its 5th to 95th percentile
says how much the verdict owes to which rounds happened to be measured (a ratio of two added
latencies that are each a small difference of large, noisy numbers, as at c=100 against
llama-server, can swing from under 1 to over 2). The last column names a verdict the interval
could turn.

A second table has, per engine: the first-chunk overhead of streams at c=1 (bare and PAIR);
the added per-chunk delay at c=1, bare and PAIR (how late each chunk after the first comes,
measured from its request's first chunk against the direct call's median for the same chunk,
per percentile, minus the direct call's own spread: a chunk held back and delivered with the
next one counts as late, where an inter-chunk gap would read 0); requests/s of JSON at c=32
direct, bare, PAIR, and PAIR with the proxy worker pinned to one core (all its threads,
``os.sched_setaffinity``; client and engine unpinned); CPU time per request of the
pass-through and of PAIR's worker, plus what its broker (the host process, which reads the
job events) spent; and the worker's RSS idle after start and at the peak of
the c=100 rows. Then PAIR's per-chunk added delay p99 at every concurrency against its target
(at most 1 ms), and per stream row the first-chunk times, the inter-chunk gaps and the slowest
request of each path.

llama-server closes its connection after every streamed response without saying so, so its
streamed runs open one client connection per request, on every path alike.

Requests PAIR translates (an Ollama or Anthropic client reaching an engine that does not speak
its API) against this pass-through, and LiteLLM doing the same, are ``translation.py``'s rows.

``--twin`` calibrates the verdicts: a second bare pass-through (a process of its own, like the
first) takes PAIR's place in every run, so each "PAIR/bare" ratio compares two identical paths
and whatever it reads beyond 1x is the bench's own noise on that row.

The load generator, the engines and the proxies share this machine's cores: on a busy machine
(see the load average in the header) treat differences of a few ms, and ratios of small added
latencies, as noise; at c=100 contention rather than either proxy's own work dominates. Progress
goes to stderr, the tables to stdout. Every process it starts is stopped by PID. Not part of the
pytest run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import random
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
    PassThrough,
    ProxyHost,
    RssSampler,
    cpu_policy_of,
    median,
    percentile,
    pinned,
    run_load,
    worker_rss,
)

from backend.devtools.llama_server import search_llama_server
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.event_loop import loop_name
from tests.engines.fixtures import (
    LlamaServer,
    cached_model,
    launch_llama_server,
    stop_llama_server,
    wait_until_healthy,
)

NODE_ID = "bench-node"
LEVELS = (1, 32, 100)
JSON, STREAM = "json", "stream"
KINDS = (JSON, STREAM)
DIRECT, BARE, PAIR = "direct", "bare", "PAIR"
PATHS = (DIRECT, BARE, PAIR)
# Each row in rounds of (direct, bare, PAIR), every other round reversed; results pooled.
ROUNDS = 6
PIN_LEVEL = 32
RATIO_TARGET = 1.5  # PAIR's added latency at most this times the bare pass-through's
CHUNK_TARGET_MS = 1.0  # PAIR's per-chunk added delay p99
REPLY_TOKENS = 8
EMULATOR_MODEL = "tinyllama:latest"
EMULATOR_TOKEN_DELAY_S = 0.001
EMULATOR_SLOTS = 128
LLAMA_MODEL = "tiny"
LLAMA_CONTEXT_PER_SLOT = 256
# One compute thread: with its default (one per core) llama-server's spinning threads fight the
# client and the proxy for the two cores here, and serve 2-4 times fewer requests per second.
LLAMA_THREADS = 1
# Measured requests per path and row (JSON and stream alike), by concurrency (--quick: a quarter).
# Enough that a row's interval is narrow where the two added latencies are a few ms: at c=32
# against llama-server, 800 requests gave intervals such as 1.01-2.39 around 1.52.
EMULATOR_REQUESTS = {1: 1200, 32: 6000, 100: 9000}
LLAMA_REQUESTS = {1: 2400, 32: 2400, 100: 3000}  # llama-server at -np 100 is slower
QUICK_DIVISOR = 4
# The interval of each PAIR/bare ratio: the rounds resampled with replacement (a round's three
# runs kept together) this many times; the 5th to 95th percentile of the ratios found.
RESAMPLES = 400
INTERVAL = (0.05, 0.95)

Row = dict[str, LoadResult]  # path -> its runs of one row, pooled


@dataclass(frozen=True)
class Backend:
    """One engine as the benchmark sees it: its label, front door, paths and request bodies.

    ``stream_closes``: the engine closes its connection after each streamed response without
    saying so (llama-server does), so streamed runs open a new connection per request (on every
    path alike) instead of racing that close on a pooled one.
    """

    label: str
    engine: str
    door: str
    plain_path: str
    plain_body: dict[str, Any]
    stream_path: str
    stream_body: dict[str, Any]
    stream_format: str
    requests: dict[int, int]
    stream_closes: bool = False

    def total(self, level: int, quick: bool) -> int:
        """Measured requests per path at concurrency ``level``."""
        full = self.requests[level]
        return max(level, full // QUICK_DIVISOR) if quick else full

    def request(self, kind: str) -> tuple[str, dict[str, Any]]:
        """The URL path and body of a request of ``kind``."""
        if kind == STREAM:
            return self.stream_path, self.stream_body
        return self.plain_path, self.plain_body

    def kind_label(self, kind: str) -> str:
        return f"stream ({self.stream_format})" if kind == STREAM else "JSON"


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
    stream_format="NDJSON",
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
    stream_format="SSE",
    requests=LLAMA_REQUESTS,
    stream_closes=True,
)


@dataclass
class Findings:
    """Everything measured for one backend; ``rows`` by (request kind, concurrency)."""

    backend: Backend
    rows: dict[tuple[str, int], Row] = field(default_factory=dict)
    # The same rows round by round (path -> that round's run), for the ratios' intervals.
    rounds: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    pinned: LoadResult | None = None
    rss_peak: int = 0

    def results(self) -> list[LoadResult]:
        """Every run's result (pooled per path), for counting failures."""
        pinned_runs = [self.pinned] if self.pinned is not None else []
        return [result for row in self.rows.values() for result in row.values()] + pinned_runs


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def round_order(round_index: int) -> tuple[str, ...]:
    """Direct, bare, PAIR; every other round the other way round."""
    return PATHS if round_index % 2 == 0 else PATHS[::-1]


def pooled(parts: list[LoadResult]) -> LoadResult:
    """One path's runs as one result (requests/s over the runs' summed wall time)."""
    whole = LoadResult()
    seconds = 0.0
    for part in parts:
        whole.latencies += part.latencies
        whole.first_chunks += part.first_chunks
        whole.gaps += part.gaps
        whole.since_first += part.since_first
        whole.proxy_ms += part.proxy_ms
        whole.chunks += part.chunks
        whole.cpu_s += part.cpu_s
        whole.side_cpu_s += part.side_cpu_s
        whole.errors += part.errors
        whole.error_sample = whole.error_sample or part.error_sample
        seconds += len(part.latencies) / part.rate if part.rate else 0.0
    whole.rate = len(whole.latencies) / seconds if seconds else 0.0
    return whole


@dataclass(frozen=True)
class Runner:
    """Runs loads against one engine at ``engine_url``: directly, via ``bare``, via ``proxy``."""

    backend: Backend
    engine_url: str
    bare: PassThrough
    proxy: ProxyHost
    twin: PassThrough | None = None  # --twin: a second bare pass-through stands in for PAIR

    def target(self, path: str) -> tuple[str, int | None, int | None]:
        """Where ``path`` sends requests, and the processes whose CPU time it measures (the
        proxy, and for PAIR the host that plays its broker and takes the job events)."""
        if path == DIRECT:
            return self.engine_url, None, None
        if path == BARE:
            return self.bare.url, self.bare.process.pid, None
        if self.twin is not None:
            return self.twin.url, self.twin.process.pid, None
        return self.proxy.doors[self.backend.door], self.proxy.worker_pid, self.proxy.process.pid

    def load(self, path: str, kind: str, concurrency: int, total: int) -> LoadResult:
        """One measured run (after a warm-up on the same connections)."""
        base_url, cpu_pid, side_pid = self.target(path)
        url_path, body = self.backend.request(kind)
        url = f"{base_url}{url_path}"
        stream = kind == STREAM
        result = asyncio.run(
            run_load(
                url,
                body,
                total=total,
                concurrency=concurrency,
                stream=stream,
                warmup=max(concurrency, total // 10),
                fresh_connections=stream and self.backend.stream_closes,
                cpu_pid=cpu_pid,
                side_pid=side_pid,
            )
        )
        if result.errors:
            progress(
                f"  {path}: {result.errors} failed requests to {url}, e.g. {result.error_sample}"
            )
        return result

    def row(self, kind: str, concurrency: int, total: int) -> tuple[Row, list[Row]]:
        """``total`` requests per path in ``ROUNDS`` rounds of the three paths back to back:
        pooled, and round by round."""
        share = max(concurrency, math.ceil(total / ROUNDS))
        rounds: list[Row] = []
        for round_index in range(ROUNDS):
            rounds.append(
                {
                    path: self.load(path, kind, concurrency, share)
                    for path in round_order(round_index)
                }
            )
        row = {path: pooled([each[path] for each in rounds]) for path in PATHS}
        p50 = " | ".join(f"{path} {median(row[path].latencies):.2f}" for path in PATHS)
        progress(
            f"{self.backend.engine} {kind} c={concurrency}: p50 {p50} ms; "
            f"req/s {' / '.join(f'{row[path].rate:.0f}' for path in PATHS)}"
        )
        return row, rounds


def broker_cpu_per_request(result: LoadResult) -> float:
    """CPU milliseconds of the proxy's broker (the host process) per measured request."""
    return result.side_cpu_s * 1000 / len(result.latencies) if result.latencies else math.nan


def cpu_per_request(result: LoadResult) -> float:
    """CPU milliseconds of the measured process per measured request."""
    return result.cpu_s * 1000 / len(result.latencies) if result.latencies else math.nan


EngineAt = Callable[[int], contextlib.AbstractContextManager[str]]


@contextlib.contextmanager
def pass_through(upstream: str, log_path: Path) -> Iterator[PassThrough]:
    """The bare pass-through to ``upstream``, stopped on the way out."""
    bare = PassThrough(upstream, log_path=log_path)
    try:
        yield bare
    finally:
        bare.stop()


def bench_backend(
    backend: Backend,
    engine_at: EngineAt,
    proxy: ProxyHost,
    logs: Path,
    *,
    quick: bool,
    cpu: set[int],
    twin: bool = False,
) -> Findings:
    """All runs for one backend; ``engine_at(c)`` provides the engine URL sized for ``c``;
    ``twin``: a second bare pass-through in PAIR's place."""
    findings = Findings(backend)
    for level in LEVELS:
        total = backend.total(level, quick)
        bare_log = logs / f"pass-through-{backend.engine}-c{level}.log"
        with contextlib.ExitStack() as stack:
            engine_url = stack.enter_context(engine_at(level))
            bare = stack.enter_context(pass_through(engine_url, bare_log))
            twin_log = logs / f"twin-{backend.engine}-c{level}.log"
            second = stack.enter_context(pass_through(engine_url, twin_log)) if twin else None
            runner = Runner(backend, engine_url, bare, proxy, second)
            if level == max(LEVELS):
                with RssSampler(proxy.worker_pid) as sampler:
                    bench_level(findings, runner, level, total)
                findings.rss_peak = sampler.peak
            else:
                bench_level(findings, runner, level, total)
            if level == PIN_LEVEL:
                findings.pinned = pinned_run(runner, level, total, cpu)
    return findings


def bench_level(findings: Findings, runner: Runner, level: int, total: int) -> None:
    """The JSON row and the stream row at concurrency ``level``."""
    for kind in KINDS:
        findings.rows[(kind, level)], findings.rounds[(kind, level)] = runner.row(
            kind, level, total
        )


def pinned_run(runner: Runner, level: int, total: int, cpu: set[int]) -> LoadResult:
    """JSON via PAIR with every thread of the proxy worker pinned to ``cpu``."""
    _, pid, _ = runner.target(PAIR)
    assert pid is not None
    with pinned(pid, cpu):
        result = runner.load(PAIR, JSON, level, total)
    progress(
        f"{runner.backend.engine} json c={level}, worker pinned to CPU {sorted(cpu)}: "
        f"{result.rate:.0f}/s, worker CPU {cpu_per_request(result):.3f} ms/request"
    )
    return result


def local_target(url: str, models: list[str], slots: int) -> RouteTarget:
    """This node's own engine, as the routing table names it."""
    return RouteTarget(node_id=NODE_ID, kind="local", base_url=url, models=models, slots=slots)


def routing(**engines: RouteTarget) -> ProxyTargets:
    """A table with one local target per engine."""
    return ProxyTargets(node_id=NODE_ID, engines={name: [t] for name, t in engines.items()})


# --- the report -----------------------------------------------------------------------------


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def added_ms(via: list[float], direct: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``via`` minus that of ``direct``."""
    return percentile(via, fraction) - percentile(direct, fraction)


def chunk_lags(result: LoadResult, direct: LoadResult) -> list[float]:
    """How late each chunk after the first came, against the direct call's median for the
    same chunk (ms after its request's first chunk). Unlike inter-chunk gaps, a chunk held
    back and delivered together with the next one counts as late, not as a zero gap."""
    reference: list[float] = []
    for index in range(max((len(offsets) for offsets in direct.since_first), default=0)):
        same = [offsets[index] for offsets in direct.since_first if len(offsets) > index]
        reference.append(median(same))
    return [
        offset - reference[index]
        for offsets in result.since_first
        for index, offset in enumerate(offsets)
        if index < len(reference)
    ]


def chunk_added(row: Row, path: str, fraction: float) -> float:
    """``path``'s per-chunk added delay at ``fraction``: its chunk lags' percentile minus the
    direct call's own."""
    direct = row[DIRECT]
    return added_ms(chunk_lags(row[path], direct), chunk_lags(direct, direct), fraction)


def added(via: list[float], direct: list[float], fraction: float) -> str:
    return ms(added_ms(via, direct, fraction))


def ratio(pair_added: float, bare_added: float) -> float:
    """PAIR's added latency over the bare pass-through's; NaN when the bare one is <= 0."""
    return pair_added / bare_added if bare_added > 0 else math.nan


def ratio_interval(rounds: list[Row], fraction: float, seed: int = 0) -> tuple[float, float]:
    """How far the ratio at ``fraction`` moves with the rounds that happened to be measured:
    the ``INTERVAL`` percentiles of the ratio over ``RESAMPLES`` draws of as many rounds, with
    replacement (a round's three runs stay together). A draw where the bare pass-through adds
    nothing counts as infinite when PAIR adds something (as bad as it gets) and is left out
    when neither does; NaN when half the draws are left out."""
    draw = random.Random(seed)
    found: list[float] = []
    for _ in range(RESAMPLES):
        picked = [draw.choice(rounds) for _ in rounds]
        d, b, p = ([x for each in picked for x in each[path].latencies] for path in PATHS)
        bare_added, pair_added = added_ms(b, d, fraction), added_ms(p, d, fraction)
        if bare_added > 0:
            found.append(pair_added / bare_added)
        elif pair_added > 0:
            found.append(math.inf)
    if len(found) < RESAMPLES / 2:
        return math.nan, math.nan
    low, high = (percentile(found, edge) for edge in INTERVAL)
    return low, high


def ratio_cell(value: float, interval: tuple[float, float]) -> str:
    if math.isnan(value):
        return "n/a"
    cell = f"**{value:.2f}x**" if value > RATIO_TARGET else f"{value:.2f}x"
    low, high = interval
    if math.isnan(low):
        return cell
    return f"{cell} ({low:.2f}-{high:.2f})" if math.isfinite(high) else f"{cell} ({low:.2f}-inf)"


def over_target(ratios: dict[str, float], intervals: dict[str, tuple[float, float]]) -> str:
    """The percentiles whose ratio misses the target, bold; ``ok`` or ``n/a`` otherwise; and
    which verdicts the rounds measured could turn (the target inside the interval)."""
    over = [name for name, value in ratios.items() if value > RATIO_TARGET]
    verdict = f"**over: {', '.join(over)}**" if over else "ok"
    if not over and all(math.isnan(value) for value in ratios.values()):
        return "n/a"
    unsure = [name for name, (low, high) in intervals.items() if low <= RATIO_TARGET < high]
    return f"{verdict} (within the interval: {', '.join(unsure)})" if unsure else verdict


def main_row(findings: Findings, kind: str, level: int, row: Row, rounds: list[Row]) -> str:
    d, b, p = (row[path].latencies for path in PATHS)
    cells = [findings.backend.label, findings.backend.kind_label(kind), str(level), str(len(p))]
    cells += [ms(percentile(d, 0.5)), ms(percentile(d, 0.99))]
    ratios: dict[str, float] = {}
    intervals: dict[str, tuple[float, float]] = {}
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        bare_added, pair_added = added_ms(b, d, fraction), added_ms(p, d, fraction)
        ratios[name] = ratio(pair_added, bare_added)
        intervals[name] = ratio_interval(rounds, fraction)
    cells += [added(b, d, 0.5), added(b, d, 0.99), added(p, d, 0.5), added(p, d, 0.99)]
    cells += [ratio_cell(ratios[name], intervals[name]) for name in ("p50", "p99")]
    cells += [" / ".join(f"{row[path].rate:.0f}" for path in PATHS)]
    cells += [over_target(ratios, intervals)]
    return f"| {' | '.join(cells)} |"


def main_table(all_findings: list[Findings]) -> list[str]:
    lines = [
        "| engine | request | c | n | direct p50 | direct p99 | bare added p50 "
        "| bare added p99 | PAIR added p50 | PAIR added p99 | PAIR/bare p50 | PAIR/bare p99 "
        f"| req/s direct / bare / PAIR | PAIR/bare <= {RATIO_TARGET:g}x |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for findings in all_findings:
        for kind in KINDS:
            for level in LEVELS:
                row = findings.rows.get((kind, level))
                if row is not None:
                    rounds = findings.rounds[(kind, level)]
                    lines.append(main_row(findings, kind, level, row, rounds))
    return lines


def per_path(row: Row | None, pick: Callable[[LoadResult], list[float]]) -> str:
    """Bare and PAIR minus direct, p50 / p99, of the samples ``pick`` takes from each result."""
    if row is None:
        return "n/a"
    d = pick(row[DIRECT])
    return "; ".join(
        f"{path} {added(pick(row[path]), d, 0.5)} / {added(pick(row[path]), d, 0.99)}"
        for path in (BARE, PAIR)
    )


def extras_row(findings: Findings, idle_rss: int) -> str:
    stream, plain = findings.rows.get((STREAM, 1)), findings.rows.get((JSON, PIN_LEVEL))
    rates = cpu_cost = "n/a"
    if plain is not None:
        pinned_rate = f"{findings.pinned.rate:.0f}" if findings.pinned is not None else "n/a"
        rates = " / ".join([*(f"{plain[path].rate:.0f}" for path in PATHS), pinned_rate])
        bare_cpu, pair_cpu = cpu_per_request(plain[BARE]), cpu_per_request(plain[PAIR])
        broker_cpu = broker_cpu_per_request(plain[PAIR])
        cpu_cost = (
            f"{bare_cpu:.3f} / {pair_cpu:.3f} + {broker_cpu:.3f} ms "
            f"(PAIR: {1000 / pair_cpu:.0f} req/s per busy core)"
        )
    cells = [
        findings.backend.label,
        per_path(stream, lambda result: result.first_chunks) + " ms",
        chunk_cells(stream),
        rates,
        cpu_cost,
        f"{idle_rss / 2**20:.1f} / {findings.rss_peak / 2**20:.1f} MB",
    ]
    return f"| {' | '.join(cells)} |"


def chunk_cells(row: Row | None) -> str:
    """Bare and PAIR per-chunk added delay, p50 / p99."""
    if row is None:
        return "n/a"
    return (
        "; ".join(
            f"{path} {ms(chunk_added(row, path, 0.5))} / {ms(chunk_added(row, path, 0.99))}"
            for path in (BARE, PAIR)
        )
        + " ms"
    )


def extras_table(all_findings: list[Findings], idle_rss: int, cpu: set[int]) -> list[str]:
    lines = [
        "| engine | first-chunk added p50 / p99 (c=1 stream) "
        "| per-chunk added p50 / p99 (how late each chunk after the first comes, "
        "vs direct; c=1 stream) "
        f"| req/s JSON c={PIN_LEVEL}: direct / bare / PAIR / PAIR, worker pinned to CPU "
        f"{','.join(map(str, sorted(cpu)))} "
        f"| CPU per request, JSON c={PIN_LEVEL}: bare / PAIR worker + its broker (job events) "
        f"| PAIR worker RSS idle / peak at c={max(LEVELS)} |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    lines += [extras_row(findings, idle_rss) for findings in all_findings]
    return lines


def chunk_target(all_findings: list[Findings]) -> list[str]:
    """PAIR's (and the bare pass-through's) per-chunk added delay p99 at every concurrency."""
    lines = []
    for findings in all_findings:
        cells = []
        for level in LEVELS:
            row = findings.rows.get((STREAM, level))
            if row is None:
                continue
            pair_p99 = chunk_added(row, PAIR, 0.99)
            verdict = "**over**" if pair_p99 > CHUNK_TARGET_MS else "ok"
            cells.append(
                f"c={level} {ms(pair_p99)} ms {verdict} "
                f"(bare {ms(chunk_added(row, BARE, 0.99))} ms)"
            )
        lines.append(
            f"- {findings.backend.label}, PAIR per-chunk added delay p99 "
            f"(target <= {CHUNK_TARGET_MS:g} ms): {'; '.join(cells)}"
        )
    return lines


def p50_p99(samples: list[float]) -> str:
    return f"{ms(percentile(samples, 0.5))} / {ms(percentile(samples, 0.99))}"


def stream_detail(all_findings: list[Findings]) -> list[str]:
    lines = []
    for findings in all_findings:
        for level in LEVELS:
            row = findings.rows.get((STREAM, level))
            if row is None:
                continue
            each = [(path, row[path]) for path in PATHS]
            lines.append(
                f"- {findings.backend.label}, stream c={level}, p50 / p99 ms: first chunk "
                + ", ".join(f"{path} {p50_p99(r.first_chunks)}" for path, r in each)
                + "; inter-chunk gap "
                + ", ".join(f"{path} {p50_p99(r.gaps)}" for path, r in each)
                + " ("
                + " / ".join(str(r.chunks) for _, r in each)
                + " chunks); slowest request "
                + ", ".join(f"{path} {ms(max(r.latencies, default=math.nan))}" for path, r in each)
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
        "--twin",
        action="store_true",
        help="calibration: a second bare pass-through in PAIR's place (how far apart two "
        "identical paths read in one run)",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        help="keep the engines', the pass-throughs' and the proxy's logs here (default: discard)",
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
                policy = cpu_policy_of(proxy.worker_pid)
                progress(f"proxy worker pid {proxy.worker_pid}, idle RSS {idle_rss / 2**20:.1f} MB")

                @contextlib.contextmanager
                def emulator_at(_: int) -> Iterator[str]:
                    yield emulator.url

                all_findings.append(
                    bench_backend(
                        EMULATOR,
                        emulator_at,
                        proxy,
                        logs,
                        quick=args.quick,
                        cpu=cpu,
                        twin=args.twin,
                    )
                )
                if not args.skip_llama_server:
                    llama = bench_llama_server(
                        proxy, emulator_target, logs, args.quick, cpu, twin=args.twin
                    )
                    if llama is not None:
                        all_findings.append(llama)
            finally:
                proxy.stop()
        finally:
            emulator.stop()
    seconds = time.monotonic() - began
    report(
        all_findings,
        idle_rss,
        cpu,
        quick=args.quick,
        seconds=seconds,
        load_before=load_before,
        policy=policy,
        twin=args.twin,
    )
    return 0


def bench_llama_server(
    proxy: ProxyHost,
    emulator_target: RouteTarget,
    logs: Path,
    quick: bool,
    cpu: set[int],
    *,
    twin: bool = False,
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

    return bench_backend(LLAMA, llama_at, proxy, logs, quick=quick, cpu=cpu, twin=twin)


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
    policy: str,
    twin: bool,
) -> None:
    print(
        f"Front door vs a bare pass-through vs direct: {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load_before:.1f} "
        f"before and {os.getloadavg()[0]:.1f} after, {seconds:.0f} s"
        f"{' (--quick)' if quick else ''}. Latencies in ms, closed-loop clients; added = path - "
        "direct, per percentile; PAIR/bare = PAIR's added over the bare pass-through's (n/a when "
        f"the bare one is <= 0; bold when over {RATIO_TARGET:g}x), in brackets the "
        f"{INTERVAL[0] * 100:g}th-{INTERVAL[1] * 100:g}th percentile of that ratio over "
        f"{RESAMPLES} resamplings of the rounds; n = measured requests per "
        f"path, in {ROUNDS} rounds (direct, bare, PAIR; then reversed), pooled. "
        + (
            "CALIBRATION: every PAIR column is a second bare pass-through."
            if twin
            else f"PAIR's worker runs on {loop_name()}'s event loop (PAIR_EVENT_LOOP) as a "
            f"{policy} task (PAIR_CPU_POLICY), the bare pass-through on asyncio's as a normal one."
        )
    )
    print()
    print("\n".join(main_table(all_findings)))
    print()
    print("\n".join(extras_table(all_findings, idle_rss, cpu)))
    print()
    print("\n".join(chunk_target(all_findings)))
    print()
    print("\n".join(stream_detail(all_findings)))
    failures = sum(result.errors for findings in all_findings for result in findings.results())
    if failures:
        print(f"\n{failures} requests failed (see stderr); they are not in the figures.")


if __name__ == "__main__":
    sys.exit(main())
