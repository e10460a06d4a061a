"""How ``bench/front_door.py`` runs one row: the same load against an engine directly and
through each proxy in front of it, in rounds, each path's runs back to back.

Not a benchmark itself. The proxies' processes are started and stopped by the context managers
here (by PID, in the classes they wrap); the load generator is ``_common.run_load``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import LoadResult, PassThrough, ProxyHost, median, run_load
from _front_door_rows import (
    BARE,
    DIRECT,
    NGINX,
    PAIR,
    ROUNDS,
    STREAM,
    Backend,
    Row,
    pooled,
    round_order,
)
from _nginx import Nginx


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Runner:
    """Runs loads against one engine at ``engine_url``: directly, via ``bare``, via ``nginx``
    (when there is one) and via ``proxy``."""

    backend: Backend
    engine_url: str
    bare: PassThrough
    proxy: ProxyHost
    nginx: Nginx | None = None
    twin: PassThrough | None = None  # --twin / --floor: a pass-through stands in for PAIR

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths of each round, in order."""
        return (DIRECT, BARE, NGINX, PAIR) if self.nginx is not None else (DIRECT, BARE, PAIR)

    def target(self, path: str) -> tuple[str, int | None, int | None]:
        """Where ``path`` sends requests, and the processes whose CPU time it measures (the
        proxy, and for PAIR the host that plays its broker and takes the job events)."""
        if path == DIRECT:
            return self.engine_url, None, None
        if path == BARE:
            return self.bare.url, self.bare.process.pid, None
        if path == NGINX and self.nginx is not None:
            return self.nginx.url, self.nginx.worker_pid, None
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
        """``total`` requests per path in ``ROUNDS`` rounds of the paths back to back: pooled,
        and round by round."""
        share = max(concurrency, math.ceil(total / ROUNDS))
        rounds: list[Row] = []
        for round_index in range(ROUNDS):
            order = round_order(self.paths, round_index)
            rounds.append({path: self.load(path, kind, concurrency, share) for path in order})
        row = {path: pooled([each[path] for each in rounds]) for path in self.paths}
        p50 = " | ".join(f"{path} {median(row[path].latencies):.2f}" for path in self.paths)
        progress(
            f"{self.backend.engine} {kind} c={concurrency}: p50 {p50} ms; "
            f"req/s {' / '.join(f'{row[path].rate:.0f}' for path in self.paths)}"
        )
        return row, rounds


@contextlib.contextmanager
def pass_through(
    upstream: str, log_path: Path, script: str = "_pass_through.py"
) -> Iterator[PassThrough]:
    """The bare pass-through (or another ``script``) to ``upstream``, stopped on the way out."""
    bare = PassThrough(upstream, log_path=log_path, script=script)
    try:
        yield bare
    finally:
        bare.stop()


@contextlib.contextmanager
def nginx_to(binary: Path | None, upstream: str, log_path: Path) -> Iterator[Nginx | None]:
    """nginx in front of ``upstream`` (None without a ``binary``), stopped on the way out."""
    if binary is None:
        yield None
        return
    nginx = Nginx(binary, upstream, log_path=log_path)
    try:
        yield nginx
    finally:
        nginx.stop()
