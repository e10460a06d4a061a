"""The front door's cost, calibrated: the same requests to an engine directly, through a bare
aiohttp pass-through, through nginx and through PAIR's proxy, in one run.

    .venv/bin/python bench/front_door.py [--quick] [--skip-llama-server] [--logs DIR]
        [--twin | --floor] [--background-load N]

Two engines on loopback: the Ollama emulator with fixed timing (no load delay, 8 reply tokens
1 ms apart, 128 slots) and a real ``llama-server`` with the generated tiny model (8 tokens per
reply, one compute thread, restarted for each concurrency level with ``-np`` equal to it).
Four paths to each, in the same process layout (client -> one process on loopback -> engine):

- ``direct``: the engine itself;
- ``bare``: a bare aiohttp pass-through (``_pass_through.py``, a child process: one pooled
  client session with ``limit=0``, body read whole, the answer streamed back chunk by chunk with
  ``iter_any()``, one retry on a pooled connection the engine had closed, as PAIR does), started
  afresh per concurrency level; the calibration point: what any Python proxy in front costs;
- ``nginx``: Debian's nginx (``_nginx.py``: one worker, ``keepalive 32`` to the engine over
  HTTP/1.1, ``proxy_buffering off`` and ``proxy_request_buffering off``, a generated
  configuration in a temp dir), started afresh per concurrency level; the practical limit of a
  pass-through. Where nginx is not installed its rows are left out and the report says why;
- ``PAIR``: PAIR's real proxy worker under a ``ProxyComponent`` hosted in a child process
  (``_proxy_host.py``, as the broker hosts it), with a routing table that names both engines as
  this node's targets with those slot counts.

Two request kinds: JSON (``stream: false``: ``/api/generate`` on the emulator,
``/v1/chat/completions`` on llama-server) and streams (NDJSON ``/api/chat`` on the emulator,
SSE ``/v1/chat/completions`` on llama-server). For each engine, kind and concurrency 1, 32 and
100 (closed-loop clients), one row of the main table: the latency p50/p99 direct, the added
latency (path minus direct, per percentile) of each proxy, the ratios PAIR/bare (the target is
at most 1.5: a ratio over it is bold and the last column names it) and PAIR/nginx (bold over
2), n/a when the other path added nothing measurable (<= 0), and requests/s of every path. Each
row is measured in six rounds of a sixth of the requests, the paths' runs of a round back to
back and every other round in reverse order (direct, bare, nginx, PAIR, then PAIR, nginx, bare,
direct), pooled: each path sees the same machine state on average and a drift in the
background load cancels out. Every run has its own warm-up on its own connections. Each ratio
also has an interval: the rounds are drawn again with replacement (a round's runs together) 400
times and the ratio recomputed; its 2.5th to 97.5th percentile says how much the verdict owes
to which rounds happened to be measured (a ratio of two added latencies that are each a small
difference of large, noisy numbers, as at c=100 against llama-server, can swing from under 1
to over 2). The last column names a verdict the interval could turn.

A second table has, per engine: the first-chunk overhead of streams at c=1 and the added
per-chunk delay at c=1 of each proxy (how late each chunk after the first comes, measured from
its request's first chunk against the direct call's median for the same chunk, per percentile,
minus the direct call's own spread: a chunk held back and delivered with the next one counts as
late, where an inter-chunk gap would read 0); requests/s of JSON at c=32 on every path, and via
PAIR with the proxy worker pinned to one core (all its threads, ``os.sched_setaffinity``; client
and engine unpinned); CPU time per request of the pass-through, of nginx's worker and of PAIR's
worker, plus what PAIR's broker (the host process, which reads the job events) spent; and the
worker's RSS idle after start and at the peak of the c=100 rows. Then PAIR's per-chunk added
delay p99 at every concurrency against its target (at most 1 ms), and per stream row the
first-chunk times, the inter-chunk gaps and the slowest request of each path.

llama-server closes its connection after every streamed response without saying so, so its
streamed runs open one client connection per request, on every path alike.

``--background-load N`` runs N busy processes (``_background.py``: a Python interpreter each,
spinning at the default niceness) for the whole of the measured rounds, as the other programs
on a user's desktop would; the header says N and the load average at the end of the rounds.

Requests PAIR translates (an Ollama or Anthropic client reaching an engine that does not speak
its API) against this pass-through, and LiteLLM doing the same, are ``translation.py``'s rows.

``--twin`` calibrates the verdicts: a second bare pass-through (a process of its own, like the
first) takes PAIR's place in every run, so each "PAIR/bare" ratio compares two identical paths
and whatever it reads beyond 1x is the bench's own noise on that row. ``--floor`` puts the Python
floor in PAIR's place instead (``_raw_floor.py``: uvloop and httptools, no framework, no routing):
how close to nginx any Python pass-through on this machine can come.

The load generator, the engines and the proxies share this machine's cores: on a busy machine
(see the load average in the header) treat differences of a few ms, and ratios of small added
latencies, as noise; at c=100 contention rather than either proxy's own work dominates. Progress
goes to stderr, the tables to stdout. Every process it starts is stopped by PID. Not part of the
pytest run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
from _background import BackgroundLoad
from _common import (
    Emulator,
    LoadResult,
    ProxyHost,
    RssSampler,
    cpu_policy_of,
    pinned,
    worker_rss,
)
from _front_door_report import RunFacts, report
from _front_door_rows import (
    JSON,
    KINDS,
    LEVELS,
    PAIR,
    PIN_LEVEL,
    Backend,
    Findings,
)
from _front_door_runner import Runner, nginx_to, pass_through, progress
from _nginx import search_nginx

from backend.devtools.llama_server import search_llama_server
from backend.protocol.proxy import ProxyTargets, RouteTarget, SlotApi
from backend.workers import cpu_policy
from tests.engines.fixtures import (
    LlamaServer,
    cached_model,
    launch_llama_server,
    stop_llama_server,
    wait_until_healthy,
)

NODE_ID = "bench-node"
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


EngineAt = Callable[[int], contextlib.AbstractContextManager[str]]


@dataclass(frozen=True)
class Setup:
    """What every backend's runs share: the proxy, where logs go, the options."""

    proxy: ProxyHost
    logs: Path
    quick: bool
    cpu: set[int]
    nginx: Path | None  # the nginx binary, or None for no nginx rows
    twin: str | None = None  # --twin / --floor: the pass-through script standing in for PAIR


def bench_backend(backend: Backend, engine_at: EngineAt, setup: Setup) -> Findings:
    """All runs for one backend; ``engine_at(c)`` provides the engine URL sized for ``c``."""
    findings = Findings(backend)
    proxy, logs = setup.proxy, setup.logs
    for level in LEVELS:
        total = backend.total(level, setup.quick)
        named = f"{backend.engine}-c{level}"
        with contextlib.ExitStack() as stack:
            engine_url = stack.enter_context(engine_at(level))
            bare = stack.enter_context(pass_through(engine_url, logs / f"pass-through-{named}.log"))
            nginx = stack.enter_context(
                nginx_to(setup.nginx, engine_url, logs / f"nginx-{named}.log")
            )
            twin_log = logs / f"twin-{named}.log"
            second = (
                stack.enter_context(pass_through(engine_url, twin_log, setup.twin))
                if setup.twin
                else None
            )
            runner = Runner(backend, engine_url, bare, proxy, nginx, second)
            if level == max(LEVELS):
                with RssSampler(proxy.worker_pid) as sampler:
                    bench_level(findings, runner, level, total)
                findings.rss_peak = sampler.peak
            else:
                bench_level(findings, runner, level, total)
            if level == PIN_LEVEL:
                findings.pinned = pinned_run(runner, level, total, setup.cpu)
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
    per_request = result.cpu_s * 1000 / len(result.latencies) if result.latencies else math.nan
    progress(
        f"{runner.backend.engine} json c={level}, worker pinned to CPU {sorted(cpu)}: "
        f"{result.rate:.0f}/s, worker CPU {per_request:.3f} ms/request"
    )
    return result


def local_target(url: str, models: list[str], slots: int) -> RouteTarget:
    """This node's own engine, as the routing table names it."""
    return RouteTarget(node_id=NODE_ID, kind="local", base_url=url, models=models, slots=slots)


def routing(**engines: RouteTarget) -> ProxyTargets:
    """A table with one local target per engine."""
    return ProxyTargets(node_id=NODE_ID, engines={name: [t] for name, t in engines.items()})


# --- orchestration --------------------------------------------------------------------------


def arguments() -> argparse.Namespace:
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
        "--floor",
        action="store_true",
        help="the Python floor (bench/_raw_floor.py: uvloop + httptools, no framework) in "
        "PAIR's place",
    )
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="N busy processes (CPU spin, default niceness) during the measured rounds",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        help="keep the engines', the pass-throughs', nginx's and the proxy's logs here "
        "(default: discard)",
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    cpu = {min(os.sched_getaffinity(0))}
    began = time.monotonic()
    load_before = os.getloadavg()[0]
    nginx = search_nginx()
    if nginx.binary is None:
        progress(f"nginx rows skipped: {nginx.reason}")
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
        stack.callback(emulator.stop)
        emulator_target = local_target(emulator.url, [EMULATOR_MODEL], EMULATOR_SLOTS)
        proxy = ProxyHost(routing(ollama=emulator_target), log_path=logs / "proxy.log")
        stack.callback(proxy.stop)
        time.sleep(1.0)
        idle_rss = worker_rss(proxy.worker_pid)
        policy = cpu_policy_of(proxy.worker_pid)
        if cpu_policy.wanted() == "adaptive":  # normal at rest: say when it switches
            policy += f" (adaptive: batch from {cpu_policy.BATCH_AT} requests in flight)"
        progress(f"proxy worker pid {proxy.worker_pid}, idle RSS {idle_rss / 2**20:.1f} MB")
        stand_in = "_raw_floor.py" if args.floor else "_pass_through.py" if args.twin else None
        setup = Setup(proxy, logs, args.quick, cpu, nginx.binary, twin=stand_in)

        @contextlib.contextmanager
        def emulator_at(_: int) -> Iterator[str]:
            yield emulator.url

        with BackgroundLoad(args.background_load) as background:
            if background.pids:
                progress(f"{args.background_load} busy background processes: {background.pids}")
            all_findings.append(bench_backend(EMULATOR, emulator_at, setup))
            if not args.skip_llama_server:
                llama = bench_llama_server(setup, emulator_target)
                if llama is not None:
                    all_findings.append(llama)
            load_during = os.getloadavg()[0]
    facts = RunFacts(
        idle_rss=idle_rss,
        cpu=cpu,
        quick=args.quick,
        seconds=time.monotonic() - began,
        load_before=load_before,
        load_during=load_during,
        policy=policy,
        twin=stand_in,
        background_load=args.background_load,
        nginx_missing=nginx.reason,
    )
    report(all_findings, facts)
    return 0


def bench_llama_server(setup: Setup, emulator_target: RouteTarget) -> Findings | None:
    """The llama-server runs, or None (with the reason on stderr) when it is not installed."""
    search = search_llama_server()
    if search.binary is None:
        progress(f"llama-server rows skipped: {search.reason}")
        return None
    binary = search.binary
    model = cached_model("tiny")

    @contextlib.contextmanager
    def llama_at(slots: int) -> Iterator[str]:
        log_path = setup.logs / f"llama-server-np{slots}.log"
        server = start_llama_server(binary, model, slots, log_path)
        try:
            # As the broker names a llama-server it launched: one model, its slot API (so
            # requests are pinned to slots, as users' are), this launch's instance.
            target = msgspec.structs.replace(
                local_target(server.base_url, [LLAMA_MODEL], slots),
                single_model=True,
                resident=[LLAMA_MODEL],
                resident_known=True,
                instance=1,
                slot_api=SlotApi(),
            )
            setup.proxy.update(routing(ollama=emulator_target, llamacpp=target))
            yield server.base_url
        finally:
            stop_llama_server(server)

    return bench_backend(LLAMA, llama_at, setup)


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


if __name__ == "__main__":
    sys.exit(main())
