"""Bytecodes per request of PAIR's proxy worker, by function and file: where its Python work goes.

    .venv/bin/python bench/opcodes.py [--kind JSON|stream] [--level C] [--requests N]
        [--top N] [--json FILE]

``instructions.py`` counts the worker's instructions per request, but callgrind sees Python as
one C function (the interpreter's loop), so it cannot say which of PAIR's functions they went
to. This script can: the worker runs with ``bench/_opcount/`` first on its path, whose
``sitecustomize`` traces every bytecode once told to (``sys.settrace`` with
``f_trace_opcodes``). Like callgrind's count, a bytecode count does not depend on how busy the
machine is: runs of one tree agree within about 0.25 % (timers that fire by the clock move a
little with the pace), so a change of 1 % shows. Each bytecode costs a different amount of
machine work, and work done in C (parsing headers in llhttp, msgspec, the event loop) is not
counted: read it beside ``instructions.py``.

One Ollama emulator (8 reply tokens 1 ms apart, 128 slots, as in ``instructions.py``) behind
the worker under a ``_proxy_host.py``; a warm-up, then counting on, ``--requests`` requests of
``--kind`` at concurrency ``--level``, counting off. Prints bytecodes and calls per request, by
file then by function. Tracing makes the worker some 30 times slower: keep the level low
enough for the requests to finish well within their timeouts. Not run by pytest; every process
it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, Emulator, ProxyHost, run_load
from instructions import KINDS, MODEL, NODE_ID, REPLY_TOKENS, SLOTS

from backend.protocol.proxy import ProxyTargets, RouteTarget

WARMUP = 200
DUMP_WAIT_S = 30.0
_SHORT = (
    (
        str(ROOT / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
        + "/site-packages/",
        "",
    ),
    (str(ROOT) + "/", ""),
    (os.path.dirname(os.__file__) + "/", "std/"),
)


def short(path: str) -> str:
    for prefix, replacement in _SHORT:
        if path.startswith(prefix):
            return replacement + path[len(prefix) :]
    return path


def count(kind: str, level: int, requests: int, logs: Path) -> list[list[object]]:
    """The worker's rows (file, line, name, bytecodes, calls) over ``requests`` requests."""
    out = logs / "opcodes.json"
    os.environ["PAIR_OPCOUNT_OUT"] = str(out)
    path_env = os.pathsep.join([str(Path(__file__).with_name("_opcount")), str(ROOT)])
    os.environ["PAIR_BENCH_WORKER_PREFIX"] = f"env PYTHONPATH={path_env}"
    emulator = Emulator.fixed(
        model=MODEL,
        token_delay=0.001,
        reply_tokens=REPLY_TOKENS,
        parallel=SLOTS,
        log_path=logs / "emulator.log",
    )
    try:
        target = RouteTarget(
            node_id=NODE_ID, kind="local", base_url=emulator.url, models=[MODEL], slots=SLOTS
        )
        table = ProxyTargets(node_id=NODE_ID, engines={"ollama": [target]})
        proxy = ProxyHost(table, log_path=logs / "proxy.log")
        try:
            api_path, body = KINDS[kind]
            url = proxy.doors["ollama"] + api_path
            stream = kind == "stream"
            asyncio.run(run_load(url, body, total=WARMUP, concurrency=level, stream=stream))
            os.kill(proxy.worker_pid, signal.SIGUSR1)
            time.sleep(0.2)
            result = asyncio.run(
                run_load(url, body, total=requests, concurrency=level, stream=stream)
            )
            if result.errors:
                raise RuntimeError(f"{result.errors} requests failed: {result.error_sample}")
            os.kill(proxy.worker_pid, signal.SIGUSR2)
            deadline = time.monotonic() + DUMP_WAIT_S
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the file is written in one go; let it finish
            rows: list[list[object]] = json.loads(out.read_text(encoding="utf-8"))
            return rows
        finally:
            proxy.stop()
    finally:
        emulator.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kind", choices=sorted(KINDS), default="JSON")
    parser.add_argument("--level", type=int, default=1, help="concurrency")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--top", type=int, default=40, help="functions listed")
    parser.add_argument("--json", type=Path, help="also write the per-function rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pair-opcodes-") as folder:
        rows = count(args.kind, args.level, args.requests, Path(folder))
    if args.json is not None:
        args.json.write_text(json.dumps(rows), encoding="utf-8")
    n = args.requests
    by_file: collections.Counter[str] = collections.Counter()
    file_calls: collections.Counter[str] = collections.Counter()
    for path, _line, _name, ops, calls in rows:
        by_file[short(str(path))] += int(str(ops))
        file_calls[short(str(path))] += int(str(calls))
    total = sum(by_file.values())
    print(
        f"{args.kind} at c={args.level}, {n} requests: {total / n:,.0f} bytecodes and "
        f"{sum(file_calls.values()) / n:,.1f} calls per request\n"
    )
    print("| bytecodes/request | calls/request | file |\n|--:|--:|---|")
    for name, ops in by_file.most_common(args.top):
        print(f"| {ops / n:,.0f} | {file_calls[name] / n:.1f} | `{name}` |")
    print("\n| bytecodes/request | calls/request | function |\n|--:|--:|---|")
    rows.sort(key=lambda row: -int(str(row[3])))
    for path, line, name, ops, calls in rows[: args.top]:
        where = f"{short(str(path))}:{line} {name}"
        print(f"| {int(str(ops)) / n:,.1f} | {int(str(calls)) / n:.2f} | `{where}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
