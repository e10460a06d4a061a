"""What translating between client APIs costs at PAIR's door, against the pass-through, in one run.

    .venv/bin/python bench/translation.py [--requests N] [--logs DIR]

One real ``llama-server`` with the generated tiny model (one slot, one compute thread, 8 tokens
per reply, as ``front_door.py`` starts it at c=1) and PAIR's proxy (``_proxy_host.py``) whose
table names that one server twice: as llama-server (``llamacpp``, model ``tiny``) and as an
LM Studio (``lmstudio``, model ``tiny-lms``; llama-server answers whatever model is asked), so
a request for ``tiny-lms`` goes to an engine that speaks only the OpenAI API. The same chat
(one user message, at most 8 tokens), JSON and streamed, at c=1, by these paths:

- ``direct``: OpenAI ``/v1/chat/completions`` to llama-server itself;
- ``openai``: the same request to PAIR's door: the pass-through, the baseline of every
  translated row (llama-server does the same work for all of them);
- ``ollama``: Ollama's ``/api/chat`` (``options.num_predict``) to PAIR's Ollama door,
  translated to OpenAI's API and the answer back (NDJSON from SSE when streamed);
- ``anthropic``: Anthropic's ``/v1/messages`` for ``tiny-lms``: translated to OpenAI's API (the
  "LM Studio" does not speak Messages) and back (Anthropic's event stream from SSE);
- ``anthropic-native``: the same Messages request for ``tiny``: passed through to
  llama-server's own Messages layer (how llama-server's translation compares with PAIR's);
- ``litellm``: LiteLLM's SDK in this process, ``acompletion(model="ollama_chat/tiny")``
  against PAIR's Ollama door, so LiteLLM's translation (OpenAI's shape to Ollama's API and
  back) sits on top of the ``ollama`` path; its added time is ``litellm`` minus ``ollama``.
  Skipped, with a line saying so, when ``litellm`` is not installed (the ``bench`` extra).

Rows are measured in rounds, the paths of a round back to back, every other round in reverse
order, pooled (as ``front_door.py`` does). Per path: latency p50/p99, added over direct and over
the pass-through, the proxy worker's CPU per request (steadier than latencies on a shared
machine), and for streams the records per stream, first-record time, and the added cost per
engine chunk: (p50 minus the pass-through's p50) over the pass-through's SSE records, and the
same for the time after the first record only. Targets: translation adds at most 0.3 ms p50
over the pass-through and at most 50 us per streamed chunk. Progress on stderr, the report on
stdout. Every process it starts is stopped by PID. Not part of the pytest run.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import LoadResult, ProxyHost, percentile, run_load
from _translation_litellm import LITELLM_MISSING, litellm_load
from _translation_micro import record, translation_costs
from front_door import (
    LLAMA_MODEL,
    REPLY_TOKENS,
    local_target,
    pooled,
    progress,
    start_llama_server,
)

from backend.devtools.llama_server import search_llama_server
from backend.protocol.proxy import ProxyTargets
from tests.engines.fixtures import cached_model, stop_llama_server

NODE_ID = "bench-node"
LMSTUDIO_MODEL = "tiny-lms"
JSON, STREAM = "json", "stream"
DIRECT, OPENAI, OLLAMA, ANTHROPIC, ANTHROPIC_NATIVE, LITELLM = (
    "direct",
    "openai",
    "ollama",
    "anthropic",
    "anthropic-native",
    "litellm",
)
HTTP_PATHS = (DIRECT, OPENAI, OLLAMA, ANTHROPIC, ANTHROPIC_NATIVE)
# Many short rounds: the machine's load changes within seconds, and the added time sought is
# a fraction of a millisecond, so each translated run's p50 is compared with its baseline's
# from the same round (a few seconds apart) as well as pooled.
ROUNDS = 20
REQUESTS = 600  # measured per path and kind, over the rounds
P50_TARGET_MS = 0.3
CHUNK_TARGET_US = 50.0
_MESSAGES = [{"role": "user", "content": "hi"}]

Row = dict[str, LoadResult]
Rounds = dict[str, list[LoadResult]]  # path -> its run in each round, in order


def request_of(path: str, stream: bool) -> tuple[str, str, dict[str, Any]]:
    """The door (or ``direct``), URL path and body of ``path``'s request."""
    if path in (DIRECT, OPENAI):
        body = {"model": LLAMA_MODEL, "messages": _MESSAGES, "max_tokens": REPLY_TOKENS}
        return (
            ("direct" if path == DIRECT else "llamacpp"),
            "/v1/chat/completions",
            {
                **body,
                "stream": stream,
            },
        )
    if path == OLLAMA:
        options = {"num_predict": REPLY_TOKENS}
        body = {"model": LLAMA_MODEL, "messages": _MESSAGES, "options": options}
        return "ollama", "/api/chat", {**body, "stream": stream}
    model = LMSTUDIO_MODEL if path == ANTHROPIC else LLAMA_MODEL
    body = {"model": model, "messages": _MESSAGES, "max_tokens": REPLY_TOKENS}
    return "openai", "/v1/messages", {**body, "stream": stream}


def routing(engine_url: str) -> ProxyTargets:
    """One llama-server named twice: as itself and as an OpenAI-only LM Studio."""
    return ProxyTargets(
        node_id=NODE_ID,
        engines={
            "llamacpp": [local_target(engine_url, [LLAMA_MODEL], 1)],
            "lmstudio": [local_target(engine_url, [LMSTUDIO_MODEL], 1)],
        },
    )


def cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has run, to the nanosecond (every thread's ``schedstat``;
    ``psutil``'s figures come in 10 ms ticks, too coarse for a few hundred requests)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def load(
    path: str, stream: bool, total: int, engine_url: str, proxy: ProxyHost
) -> LoadResult:
    """One measured run of ``path`` after its own warm-up; the worker's and this process's CPU
    (``cpu_s``, ``side_cpu_s``) over both, scaled to the measured requests."""
    warmup = max(5, total // 10)
    worker_before, client_before = cpu_s(proxy.worker_pid), time.process_time()
    if path == LITELLM:
        result = await litellm_load(proxy.doors["ollama"], LLAMA_MODEL, stream, total, warmup)
    else:
        door, url_path, body = request_of(path, stream)
        base = engine_url if door == "direct" else proxy.doors[door]
        result = await run_load(
            f"{base}{url_path}",
            body,
            total=total,
            concurrency=1,
            stream=stream,
            warmup=warmup,
            # llama-server closes its connection after each stream; every path alike opens
            # one per streamed request (front_door.py does the same).
            fresh_connections=stream,
        )
    share = total / (total + warmup)
    result.cpu_s = (cpu_s(proxy.worker_pid) - worker_before) * share
    result.side_cpu_s = (time.process_time() - client_before) * share
    if result.errors:
        progress(f"  {path}: {result.errors} failed, e.g. {result.error_sample}")
    return result


async def measure(
    paths: tuple[str, ...], stream: bool, total: int, engine_url: str, proxy: ProxyHost
) -> tuple[Row, Rounds]:
    """``total`` requests per path in ``ROUNDS`` rounds, every other round reversed: pooled,
    and round by round."""
    share = math.ceil(total / ROUNDS)
    runs: Rounds = {path: [] for path in paths}
    for index in range(ROUNDS):
        for path in paths if index % 2 == 0 else paths[::-1]:
            runs[path].append(await load(path, stream, share, engine_url, proxy))
    row = {path: pooled(each) for path, each in runs.items()}
    p50 = ", ".join(f"{path} {percentile(row[path].latencies, 0.5):.2f}" for path in paths)
    progress(f"{JSON if not stream else STREAM}: p50 {p50} ms")
    return row, runs


def paired(runs: Rounds, path: str, fraction: float = 0.5) -> tuple[float, float, float]:
    """``path``'s p50 minus its baseline's, round by round (the two ran minutes apart at most,
    so a change in the machine's load moves both): the median and quartiles of those."""
    base = runs[baseline_of(path)]
    found = sorted(
        percentile(mine.latencies, fraction) - percentile(theirs.latencies, fraction)
        for mine, theirs in zip(runs[path], base, strict=True)
    )
    return percentile(found, 0.5), percentile(found, 0.25), percentile(found, 0.75)


# --- the report -----------------------------------------------------------------------------


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def p(result: LoadResult, fraction: float) -> float:
    return percentile(result.latencies, fraction)


def added(result: LoadResult, base: LoadResult, fraction: float) -> str:
    """``result``'s percentile minus ``base``'s, in ms."""
    return ms(p(result, fraction) - p(base, fraction))


def worker_us(result: LoadResult) -> float:
    """The proxy worker's CPU microseconds per measured request."""
    n = len(result.latencies)
    return result.cpu_s * 1e6 / n if n and result.cpu_s else math.nan


def client_us(result: LoadResult) -> float:
    """This process's (the client's) CPU microseconds per measured request."""
    n = len(result.latencies)
    return result.side_cpu_s * 1e6 / n if n else math.nan


def baseline_of(path: str) -> str:
    """What ``path``'s added time is measured against."""
    return OLLAMA if path == LITELLM else OPENAI


def table(measured: dict[str, tuple[Row, Rounds]]) -> list[str]:
    lines = [
        "| request | path | n | p50 | p99 | added p50 / p99 vs direct "
        "| added p50 / p99 vs baseline, pooled (baseline) "
        "| added p50 vs baseline, per round: median (quartiles) "
        "| worker CPU us/req (added) | client CPU us/req "
        f"| per-round median <= {P50_TARGET_MS:g} ms |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for kind, (row, runs) in measured.items():
        lines += [table_row(kind, path, row, runs) for path in row]
    return lines


def table_row(kind: str, path: str, row: Row, runs: Rounds) -> str:
    result, direct = row[path], row[DIRECT]
    cells = [kind, path, str(len(result.latencies)), ms(p(result, 0.5)), ms(p(result, 0.99))]
    cells.append(f"{added(result, direct, 0.5)} / {added(result, direct, 0.99)}")
    if path in (DIRECT, OPENAI):
        worker = "" if path == DIRECT else f"{worker_us(result):.0f}"
        cells += ["", "", worker, f"{client_us(result):.0f}", ""]
        return f"| {' | '.join(cells)} |"
    base = row[baseline_of(path)]
    pooled_added = f"{added(result, base, 0.5)} / {added(result, base, 0.99)}"
    middle, low, high = paired(runs, path)
    extra = worker_us(result) - worker_us(base)
    verdict = ""
    if path in (OLLAMA, ANTHROPIC):
        verdict = "ok" if middle <= P50_TARGET_MS else "**over**"
    cells += [
        f"{pooled_added} ({baseline_of(path)})",
        f"{ms(middle)} ({ms(low)} to {ms(high)})",
        f"{worker_us(result):.0f} ({extra:+.0f})",
        f"{client_us(result):.0f}",
        verdict,
    ]
    return f"| {' | '.join(cells)} |"


def per_chunk(row: Row, runs: Rounds) -> list[str]:
    """Per streamed path: records per stream, first record, and the added cost per chunk."""
    base = row[OPENAI]
    engine_chunks = base.chunks / len(base.latencies) if base.latencies else math.nan
    lines = [
        f"Streams: the engine sends {engine_chunks:.1f} SSE records per stream (the "
        "pass-through's count, `data: [DONE]` included); per chunk = the added p50 (per-round "
        "median; and the pooled time after the first record) over those records.",
        "",
        "| path | records per stream (client's lines) | first record p50 "
        "| added p50 per round, whole stream | pooled, after the first record "
        "| per chunk: whole / after first | worker CPU per chunk, added "
        f"| per-chunk target <= {CHUNK_TARGET_US:g} us |",
        "|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    lines += [
        chunk_row(path, row, runs, engine_chunks) for path in row if path not in (DIRECT, OPENAI)
    ]
    return lines


def chunk_row(path: str, row: Row, runs: Rounds, engine_chunks: float) -> str:
    result, ref = row[path], row[baseline_of(path)]
    first = percentile(result.first_chunks, 0.5)
    whole = paired(runs, path)[0]
    after = (p(result, 0.5) - first) - (p(ref, 0.5) - percentile(ref.first_chunks, 0.5))
    whole_us, after_us = whole * 1000 / engine_chunks, after * 1000 / engine_chunks
    cpu_us = (worker_us(result) - worker_us(row[OPENAI])) / engine_chunks
    verdict = ""
    if path in (OLLAMA, ANTHROPIC):
        verdict = "ok" if max(whole_us, cpu_us) <= CHUNK_TARGET_US else "**over**"
    cells = [
        path,
        f"{result.chunks / max(1, len(result.latencies)):.1f}",
        ms(first),
        ms(whole),
        ms(after),
        f"{whole_us:.0f} / {after_us:.0f} us",
        f"{cpu_us:.0f} us" if path != LITELLM else "(client side)",
        verdict,
    ]
    return f"| {' | '.join(cells)} |"


async def in_process(engine_url: str) -> list[str]:
    """The translation functions alone on the engine's recorded answers, as report lines."""
    lines = [
        "The translation functions alone (in-process, on llama-server's recorded answers; "
        "median of 7 batches of 2000), us:",
        "",
        "| path | JSON request + answer | stream request + every record | per record | records |",
        "|---|--:|--:|--:|--:|",
    ]
    for path, engine in ((OLLAMA, "llamacpp"), (ANTHROPIC, "lmstudio")):
        _, url_path, body = request_of(path, False)
        openai_body = request_of(OPENAI, False)[2]
        costs = translation_costs(await record(engine_url, openai_body), engine, url_path, body)
        lines.append(
            f"| {path} | {costs['json']:.1f} | {costs['stream']:.1f} "
            f"| {costs['per record']:.1f} | {costs['records']:.0f} |"
        )
    return lines


# --- orchestration --------------------------------------------------------------------------


@contextlib.contextmanager
def llama_server(logs: Path) -> Iterator[str]:
    """The tiny model on a one-slot llama-server; its URL, stopped on the way out."""
    search = search_llama_server()
    if search.binary is None:
        raise SystemExit(f"llama-server not found: {search.reason}")
    server = start_llama_server(search.binary, cached_model("tiny"), 1, logs / "llama-server.log")
    try:
        yield server.base_url
    finally:
        stop_llama_server(server)


def report(
    measured: dict[str, tuple[Row, Rounds]], micro: list[str], began: float, load_before: float
) -> None:
    print(
        f"Translation at PAIR's door vs the pass-through: {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load_before:.1f} "
        f"before and {os.getloadavg()[0]:.1f} after, {time.monotonic() - began:.0f} s. "
        f"llama-server, tiny model, {REPLY_TOKENS} tokens, c=1; latencies in ms; {ROUNDS} "
        "rounds, every other reversed, pooled. Baseline: the OpenAI pass-through (for litellm: "
        "the same Ollama request sent to PAIR's Ollama door by aiohttp)."
    )
    if LITELLM_MISSING:
        print(f"litellm: skipped ({LITELLM_MISSING}).")
    for lines in (table(measured), per_chunk(*measured[STREAM]), micro):
        print()
        print("\n".join(lines))
    failures = sum(r.errors for row, _ in measured.values() for r in row.values())
    if failures:
        print(f"\n{failures} requests failed (see stderr); they are not in the figures.")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=REQUESTS, help="per path and kind")
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    args = parser.parse_args()
    paths = HTTP_PATHS if LITELLM_MISSING else (*HTTP_PATHS, LITELLM)
    if LITELLM_MISSING:
        progress(f"litellm row skipped: {LITELLM_MISSING}")
    began, load_before = time.monotonic(), os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        logs: Path = args.logs or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="pair-bench-"))
        )
        logs.mkdir(parents=True, exist_ok=True)
        engine_url = stack.enter_context(llama_server(logs))
        proxy = ProxyHost(routing(engine_url), log_path=logs / "proxy.log")
        stack.callback(proxy.stop)
        micro = asyncio.run(in_process(engine_url))
        measured: dict[str, tuple[Row, Rounds]] = {}
        for kind in (JSON, STREAM):
            measured[kind] = asyncio.run(
                measure(paths, kind == STREAM, args.requests, engine_url, proxy)
            )
    report(measured, micro, began, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
