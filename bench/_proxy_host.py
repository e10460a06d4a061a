"""Runs PAIR's ``ProxyComponent`` for the benchmarks in a process of its own, as the broker does.

    python bench/_proxy_host.py [NODE_ID]   (started by ``_common.ProxyHost``; not run by hand)

stdin: one ``ProxyTargets`` JSON per line. The first line starts the component (front doors and
the relay on free loopback ports, the real proxy worker as its child, an identity minted for
``NODE_ID``); once the worker answers heartbeats and has the table, one JSON line goes to
stdout: ``{"doors": {door: url}, "pid": worker PID, "relay": URL, "cert": base64 DER}``.
Every later line replaces the table and is acknowledged with ``{"ok": true}``. stdin EOF closes
the doors and stops the worker. Only the public ``ProxyComponent`` API is used.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shlex
import sys
import tempfile
from pathlib import Path

import msgspec
from _common import free_port

from backend.components.identity.certificate import mint
from backend.components.proxy import component as component_module
from backend.components.proxy.component import ProxyComponent
from backend.core.clock import SystemClock
from backend.protocol.proxy import ProxyTargets
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ErrorAction, Ports, Severity

TARGETS_INTERVAL_S = 0.05
# A command put before the worker's (``bench/instructions.py`` runs it under callgrind).
WORKER_PREFIX_ENV = "PAIR_BENCH_WORKER_PREFIX"
# The worker may take a few intervals to get a new table after it changes.
SETTLE_S = 6 * TARGETS_INTERVAL_S
READY_TIMEOUT_S = 30.0

log = logging.getLogger("proxy-host")


class LoggedErrors:
    """The ``ErrorSink`` the component reports to: the host's stderr."""

    def raise_error(
        self,
        error_id: str,
        message: str,
        *,
        severity: Severity = "error",
        action: ErrorAction | None = None,
    ) -> None:
        log.warning("error %s (%s): %s", error_id, severity, message)

    def clear_error(self, error_id: str) -> None:
        pass


async def read_targets() -> ProxyTargets | None:
    line = await asyncio.to_thread(sys.stdin.readline)
    return msgspec.json.decode(line, type=ProxyTargets) if line.strip() else None


def answer(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _stored() -> None:
    """The broker's confirmation that it stored every job event sent before (it takes none)."""


async def host(node_id: str) -> None:
    table = await read_targets()
    if table is None:
        return
    with tempfile.TemporaryDirectory(prefix="pair-bench-host-") as journal_dir:
        await _host(node_id, table, journal_dir)


async def _host(node_id: str, first: ProxyTargets, journal_dir: str) -> None:
    current = [first]
    credentials = mint(NodeId(node_id))
    ports = Ports(
        node=free_port(),
        ollama=free_port(),
        openai=free_port(),
        llamacpp=free_port(),
        relay=free_port(),
    )
    component = ProxyComponent(
        ports=ports,
        errors=LoggedErrors(),
        clock=SystemClock(),
        targets=lambda: current[0],
        credentials=credentials,
        host="127.0.0.1",
        environment=lambda: {"PAIR_LOG_LEVEL": os.environ.get("PAIR_LOG_LEVEL", "warning")},
        targets_interval=TARGETS_INTERVAL_S,
        # As the broker runs it: job starts and ends journaled, the segments confirmed at once.
        jobs_journal=Path(journal_dir) / "jobs-journal",
        jobs_stored=_stored,
    )
    ready = asyncio.Event()
    component.bind_ready(ready.set)
    running = asyncio.create_task(component.run(), name="proxy")
    try:
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait(
            {waiting, running}, timeout=READY_TIMEOUT_S, return_when="FIRST_COMPLETED"
        )
        if running.done():
            running.result()  # raises what ended it
        if not ready.is_set():
            raise RuntimeError("the proxy worker answered no heartbeat")
        await asyncio.sleep(SETTLE_S)
        answer(
            {
                "doors": dict(component.endpoints()),
                "pid": component.pid(),
                "relay": f"https://127.0.0.1:{component.relay_port()}",
                "cert": base64.b64encode(credentials.cert_der).decode(),
            }
        )
        while (table := await read_targets()) is not None:
            current[0] = table
            await component.table_applied()  # the worker routes by it (sent at once)
            answer({"ok": True})
    finally:
        await component.close_front_doors()
        await component.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def prefix_worker(prefix: list[str]) -> None:
    """Start the worker as ``prefix`` + its own command (a bench's instrument around it)."""
    original = component_module.self_argv

    def prefixed(*args: str) -> list[str]:
        return [*prefix, *original(*args)]

    component_module.self_argv = prefixed


def main() -> int:
    level = os.environ.get("PAIR_LOG_LEVEL", "warning").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING), stream=sys.stderr)
    prefix = os.environ.get(WORKER_PREFIX_ENV)
    if prefix:
        prefix_worker(shlex.split(prefix))
    asyncio.run(host(sys.argv[1] if len(sys.argv) > 1 else "bench-node"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
