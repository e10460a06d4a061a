"""Shared pieces of the front-door benchmarks: load generation, percentiles, the proxy under test.

Not a benchmark itself. ``bench/front_door.py`` and ``bench/proxy_overhead.py`` import it as
``_common`` (scripts in ``bench/`` run with ``bench/`` first on ``sys.path``); importing it puts
the repository root on ``sys.path`` so ``backend`` and ``tests.engines.fixtures`` resolve.

Every process started here is stopped here, by its own PID.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.protocol.proxy import ProxyTargets  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

__all__ = [
    "ROOT",
    "Emulator",
    "LoadResult",
    "PassThrough",
    "ProxyHost",
    "RssSampler",
    "free_port",
    "median",
    "percentile",
    "pinned",
    "run_load",
]

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def emulator_kinds(model: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The two requests the benchmarks send the Ollama emulator, by kind: ``JSON`` (a whole
    ``/api/generate`` answer) and ``stream`` (NDJSON ``/api/chat``), as URL path and body."""
    return {
        "JSON": ("/api/generate", {"model": model, "prompt": "hi", "stream": False}),
        "stream": (
            "/api/chat",
            {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        ),
    }


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1); NaN for no samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * fraction + 0.5) - 1))]


def median(samples: list[float]) -> float:
    """The median; NaN for no samples."""
    return statistics.median(samples) if samples else float("nan")


# --- load generation ------------------------------------------------------------------------


@dataclass
class LoadResult:
    """One measured run: per-request latencies, first-chunk times and inter-chunk gaps (ms)."""

    latencies: list[float] = field(default_factory=list)
    first_chunks: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    # Per streamed request: when each chunk after the first came, ms after the first.
    since_first: list[list[float]] = field(default_factory=list)
    proxy_ms: list[float] = field(default_factory=list)
    chunks: int = 0
    # CPU seconds (user + system) that process ``cpu_pid`` spent during the measured requests,
    # and process ``side_pid`` (the proxy's broker, which takes its job events).
    cpu_s: float = 0.0
    side_cpu_s: float = 0.0
    errors: int = 0
    error_sample: str = ""
    rate: float = 0.0


async def run_load(
    url: str,
    body: dict[str, Any],
    *,
    total: int,
    concurrency: int,
    stream: bool,
    warmup: int = 0,
    fresh_connections: bool = False,
    cpu_pid: int | None = None,
    side_pid: int | None = None,
) -> LoadResult:
    """POST ``body`` to ``url`` ``total`` times from ``concurrency`` closed-loop clients.

    ``warmup`` requests go first on the same connection pool and are not counted. A streamed
    response is read line by line (NDJSON, or SSE with its blank separators skipped); its first
    non-empty line is the first chunk, and the gaps between consecutive lines are recorded.
    Requests/s is over the measured requests' wall time. ``fresh_connections`` opens a new
    connection per request (for servers that close theirs after a response without saying so).
    ``cpu_pid``: a process whose CPU time during the measured requests goes into ``cpu_s``
    (``side_pid``: into ``side_cpu_s``).
    """
    result = LoadResult()
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=fresh_connections)
    timeout = aiohttp.ClientTimeout(total=120)
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(record: bool) -> None:
            started = time.perf_counter()
            arrivals: list[float] = []
            try:
                async with session.post(url, data=payload, headers=headers) as response:
                    if stream:
                        async for line in response.content:
                            if line.strip():
                                arrivals.append(time.perf_counter())
                    else:
                        await response.read()
                    status = response.status
                    proxy_ms = response.headers.get("X-PAIR-Proxy-Ms")
            except (aiohttp.ClientError, TimeoutError) as exc:
                if record:
                    result.errors += 1
                    result.error_sample = result.error_sample or repr(exc)
                return
            done = time.perf_counter()
            if not record:
                return
            if status != 200:
                result.errors += 1
                result.error_sample = result.error_sample or f"HTTP {status} from {url}"
                return
            result.latencies.append((done - started) * 1000)
            if proxy_ms is not None:
                result.proxy_ms.append(float(proxy_ms))
            if arrivals:
                result.first_chunks.append((arrivals[0] - started) * 1000)
                result.gaps += [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
                result.since_first.append([(t - arrivals[0]) * 1000 for t in arrivals[1:]])
                result.chunks += len(arrivals)

        async def client(count: int, record: bool) -> None:
            for _ in range(count):
                await one(record)

        def shares(count: int) -> list[int]:
            return [count // concurrency + (i < count % concurrency) for i in range(concurrency)]

        if warmup:
            await asyncio.gather(*(client(n, False) for n in shares(max(warmup, concurrency))))
        cpu_before, side_before = cpu_seconds(cpu_pid), cpu_seconds(side_pid)
        begin = time.perf_counter()
        await asyncio.gather(*(client(n, True) for n in shares(total)))
        elapsed = time.perf_counter() - begin
        result.cpu_s = cpu_seconds(cpu_pid) - cpu_before
        result.side_cpu_s = cpu_seconds(side_pid) - side_before
    result.rate = len(result.latencies) / elapsed if elapsed > 0 else 0.0
    return result


# --- processes under test -------------------------------------------------------------------


def wait_for_http(url: str, process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Poll ``url`` until it answers 200; raise if the process exits or time runs out."""

    async def poll() -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while time.monotonic() < deadline and process.poll() is None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"{url} did not answer (process exit status {process.poll()})")

    asyncio.run(poll())


def stop_process(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM our child by PID, SIGKILL if it lingers; always reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


class Emulator:
    """The Ollama emulator (``python -m backend emulate ollama``) as a child process, with
    ``options`` after ``--port``."""

    def __init__(self, options: list[str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--port", str(self.port)]
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*argv, *options],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for_http(f"{self.url}/api/tags", self.process)
        except BaseException:
            self.stop()
            raise

    @classmethod
    def fixed(
        cls, *, model: str, token_delay: float, reply_tokens: int, parallel: int, log_path: Path
    ) -> Emulator:
        """One model at a fixed pace: ``token_delay`` s per token, ``reply_tokens`` each."""
        return cls(
            [
                *("--models", model, "--parallel", str(parallel)),
                *("--load-delay", "0", "--prompt-token-delay", "0"),
                *("--token-delay", str(token_delay), "--reply-tokens", str(reply_tokens)),
            ],
            log_path,
        )

    def stop(self) -> None:
        """Stop the emulator we started."""
        stop_process(self.process)


class ProxyHost:
    """PAIR's ``ProxyComponent`` in a child process (``bench/_proxy_host.py``), like a broker.

    The host opens the front doors on free loopback ports and runs the real proxy worker; the
    routing table is sent on its stdin (one JSON line per table) and acknowledged once the worker
    has had time to receive it. ``worker_pid`` is the proxy worker's PID; ``relay_url`` and
    ``cert_der`` are where its relay listens and the certificate it shows (minted for
    ``node_id``), for another host's table to name it as a peer. ``env``: more environment for
    the host and its worker (``bench/worker_variants.py``).
    """

    def __init__(
        self,
        targets: ProxyTargets,
        *,
        log_path: Path,
        node_id: str = "bench-node",
        env: Mapping[str, str] | None = None,
    ) -> None:
        host_script = str(Path(__file__).with_name("_proxy_host.py"))
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, host_script, node_id],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, "PAIR_LOG_LEVEL": "warning", **(env or {})},
            )
        self._log_path = log_path
        try:
            hello = json.loads(self._exchange(targets))
        except BaseException:
            self.stop()
            raise
        self.doors: dict[str, str] = hello["doors"]
        self.worker_pid: int = hello["pid"]
        self.relay_url: str = hello["relay"]
        self.cert_der: bytes = base64.b64decode(hello["cert"])

    def update(self, targets: ProxyTargets) -> None:
        """Replace the routing table; returns once the worker has it."""
        self._exchange(targets)

    def stop(self) -> None:
        """Close the host's stdin (it closes the doors and stops the worker), then reap it."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_process(self.process)

    def _exchange(self, targets: ProxyTargets) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(msgspec.json.encode(targets).decode() + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            tail = self._log_path.read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError("the proxy host exited:\n" + "\n".join(tail))
        return line


class PassThrough:
    """A bare aiohttp pass-through to ``upstream`` (``bench/_pass_through.py``) as a child.

    Plain HTTP unless ``pin`` (the upstream's certificate) is given: then mutual TLS with a
    certificate of its own (``cert_der``, for the upstream to trust), pooled unless ``fresh``.
    ``prefix``: a command it runs under (``bench/instructions.py``: callgrind). ``script``:
    another pass-through in ``bench/`` that speaks the same way (``_raw_floor.py``).
    """

    def __init__(
        self,
        upstream: str,
        *,
        log_path: Path,
        pin: bytes | None = None,
        fresh: bool = False,
        prefix: tuple[str, ...] = (),
        script: str = "_pass_through.py",
    ) -> None:
        script = str(Path(__file__).with_name(script))
        argv = [*prefix, sys.executable, script, upstream]
        if pin is not None:
            argv += ["--pin", base64.b64encode(pin).decode()]
        if fresh:
            argv.append("--fresh")
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError(f"the pass-through to {upstream} exited; see {log_path}")
        hello = json.loads(line)
        self.url: str = hello["url"]
        self.cert_der: bytes = base64.b64decode(hello["cert"])

    def stop(self) -> None:
        """Close its stdin (it stops serving), then reap it."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_process(self.process)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` so far (0 for None)."""
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def switches(pid: int | None) -> tuple[int, int]:
    """Context switches of process ``pid`` so far, (voluntary, involuntary), its threads summed:
    voluntary ones are its sleeps (each ends in a wake-up), involuntary ones are preemptions."""
    if pid is None:
        return 0, 0
    counts = psutil.Process(pid).num_ctx_switches()
    return int(counts.voluntary), int(counts.involuntary)


def cpu_policy_of(pid: int) -> str:
    """The kernel's scheduling policy for process ``pid``: batch, normal, or another name."""
    if not hasattr(os, "sched_getscheduler"):
        return "unknown (not Linux)"
    number = os.sched_getscheduler(pid)
    names = {os.SCHED_OTHER: "normal", os.SCHED_BATCH: "batch"}
    return names.get(number, f"policy {number}")


def worker_rss(pid: int) -> int:
    """Resident set size of one process, in bytes."""
    return int(psutil.Process(pid).memory_info().rss)


class RssSampler:
    """Polls a process's RSS from a background thread; ``peak`` is the largest value seen."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self._process = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._poll, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self._process.memory_info().rss)


@contextlib.contextmanager
def pinned(pid: int, cpus: set[int]) -> Iterator[None]:
    """Pin every thread of process ``pid`` to ``cpus``; restore the old affinity afterwards."""
    process = psutil.Process(pid)
    before = os.sched_getaffinity(pid)
    tids = [thread.id for thread in process.threads()]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for thread in process.threads():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(thread.id, before)
