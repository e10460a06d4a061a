"""Instructions per request of the proxy worker and of the bare pass-through, counted by callgrind.

    .venv/bin/python bench/instructions.py [--requests N] [--levels 1,32] [--logs DIR]

Wall-clock and CPU-time figures on a shared two-core machine swing with whatever else runs
beside them (a change once read 13 % cheaper twice with the test suite running, and even on a
quiet machine). Instructions retired do not: ``valgrind --tool=callgrind`` counts them the same
whatever the machine is doing. So this script gives the steady half of ``front_door.py``'s
figures: how much work PAIR's proxy worker does per request against a bare aiohttp
pass-through (``_pass_through.py``) on the same requests, as a ratio.

Both run under callgrind with instrumentation off (valgrind's own overhead only, so the worker
starts well within its heartbeat timeout); the Ollama emulator (8 reply tokens 1 ms apart
and 128 slots, as in ``front_door.py``; ``--token-delay``) and the load generator run natively.
The instrumented processes run some twenty times slower, so tokens that come 1 ms apart are
relayed in fewer, larger chunks than on a bare machine, and how many depends on the timing:
the stream rows swing by some 10 % from run to run, the JSON rows by about 1 %. For each
request kind (JSON ``/api/generate``, NDJSON ``/api/chat``) and concurrency, each process gets
a warm-up, then instrumentation goes
on, ``--requests`` requests are sent, and the counters are dumped (``callgrind_control``):
instructions per request, and for streams per chunk. What a process does with no request in
flight (the worker's heartbeats and timers) is counted for a few idle seconds first and taken
off at that rate for the measured run's length, so the figures do not depend on how fast the
machine ran them. Run it alone: under a heavy load the instrumented worker can miss its
heartbeats while starting.

Not run by pytest. Every process it starts is stopped by PID; callgrind's files go to a
temporary folder (or ``--logs``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _common import Emulator, PassThrough, ProxyHost, emulator_kinds, run_load

from backend.protocol.proxy import ProxyTargets, RouteTarget

NODE_ID = "bench-node"
MODEL = "tinyllama:latest"
REPLY_TOKENS = 8
SLOTS = 128
WARMUP = 60
IDLE_S = 5.0
KINDS = emulator_kinds(MODEL)
DUMP_TIMEOUT_S = 60.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def callgrind(out: Path) -> list[str]:
    """The command prefix: callgrind, counting nothing until told to."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        "--log-file=" + str(out.with_suffix(".valgrind.log")),
    ]


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def dumps(out: Path) -> set[Path]:
    return {path for path in out.parent.glob(out.name + ".*") if path.suffix[1:].isdigit()}


def totals(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


@contextlib.contextmanager
def counting(pid: int, out: Path) -> Iterator[list[int]]:
    """Count ``pid``'s instructions during the block; the total lands in the yielded list."""
    found: list[int] = []
    before = dumps(out)
    control(pid, "--instr=on")
    control(pid, "--zero")
    yield found
    control(pid, "--dump")
    control(pid, "--instr=off")
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while not (new := dumps(out) - before):
        if time.monotonic() > deadline:
            raise RuntimeError(f"callgrind wrote no dump for {pid}")
        time.sleep(0.1)
    time.sleep(0.2)  # the dump is written whole before the command answers; be generous
    found.append(sum(totals(path) for path in new))


def idle_rate(pid: int, out: Path) -> float:
    """Instructions per second ``pid`` runs with nothing to serve."""
    began = time.monotonic()
    with counting(pid, out) as found:
        time.sleep(IDLE_S)
    return found[0] / (time.monotonic() - began)


def measure(
    url: str, kind: str, process: tuple[int, Path, float], requests: int, level: int
) -> tuple[int, int]:
    """Instructions (less the idle rate's) and chunks for ``requests`` requests of ``kind``."""
    pid, out, idle = process
    path, body = KINDS[kind]
    stream = kind == "stream"
    asyncio.run(run_load(url + path, body, total=WARMUP, concurrency=level, stream=stream))
    began = time.monotonic()
    with counting(pid, out) as found:
        result = asyncio.run(
            run_load(url + path, body, total=requests, concurrency=level, stream=stream)
        )
    if result.errors:
        raise RuntimeError(f"{result.errors} requests failed: {result.error_sample}")
    return round(found[0] - idle * (time.monotonic() - began)), result.chunks


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300, help="measured per row and path")
    parser.add_argument("--levels", default="1,32", help="concurrencies, comma-separated")
    parser.add_argument("--logs", type=Path, help="keep callgrind's files and the logs here")
    parser.add_argument("--token-delay", type=float, default=0.001, help="seconds per token")
    parser.add_argument("--reply-tokens", type=int, default=REPLY_TOKENS, help="tokens per reply")
    parser.add_argument("--kinds", default=",".join(KINDS), help="JSON, stream or both")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="count the Python floor too (_raw_floor.py: uvloop + httptools, no framework)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        progress("valgrind (with callgrind_control) is needed: apt-get install valgrind")
        return 2
    levels = [int(part) for part in args.levels.split(",")]
    rows: list[str] = []
    with contextlib.ExitStack() as stack:
        logs: Path = args.logs or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="pair-instr-"))
        )
        logs.mkdir(parents=True, exist_ok=True)
        emulator = Emulator.fixed(
            model=MODEL,
            token_delay=args.token_delay,
            reply_tokens=args.reply_tokens,
            parallel=SLOTS,
            log_path=logs / "emulator.log",
        )
        stack.callback(emulator.stop)
        bare_out, pair_out = logs / "bare.cg", logs / "pair.cg"
        bare = PassThrough(
            emulator.url, log_path=logs / "bare.log", prefix=tuple(callgrind(bare_out))
        )
        stack.callback(bare.stop)
        floor = None
        if args.floor:
            floor_out = logs / "floor.cg"
            floor = PassThrough(
                emulator.url,
                log_path=logs / "floor.log",
                prefix=tuple(callgrind(floor_out)),
                script="_raw_floor.py",
            )
            stack.callback(floor.stop)
        os.environ["PAIR_BENCH_WORKER_PREFIX"] = shlex.join(callgrind(pair_out))
        target = RouteTarget(
            node_id=NODE_ID, kind="local", base_url=emulator.url, models=[MODEL], slots=SLOTS
        )
        table = ProxyTargets(node_id=NODE_ID, engines={"ollama": [target]})
        proxy = ProxyHost(table, log_path=logs / "proxy.log")
        stack.callback(proxy.stop)
        paths = {
            "bare": (bare.url, bare.process.pid, bare_out),
            "PAIR": (proxy.doors["ollama"], proxy.worker_pid, pair_out),
        }
        if floor is not None:
            paths["floor"] = (floor.url, floor.process.pid, floor_out)
        idle = {name: idle_rate(pid, out) for name, (_, pid, out) in paths.items()}
        progress(", ".join(f"{name} idle: {rate:,.0f}/s" for name, rate in idle.items()))
        for kind in args.kinds.split(","):
            for level in levels:
                counted: dict[str, tuple[int, int]] = {}
                for name, (url, pid, out) in paths.items():
                    process = (pid, out, idle[name])
                    counted[name] = measure(url, kind, process, args.requests, level)
                    per = counted[name][0] / args.requests
                    progress(f"{kind} c={level} {name}: {per:,.0f} instructions per request")
                rows.append(row(kind, level, counted, args.requests))
    print(
        f"Instructions per request, {args.requests} requests per row and path "
        f"(Ollama emulator, {args.reply_tokens} tokens per reply):\n"
    )
    print(
        "| request | c | bare | PAIR | PAIR / bare | per chunk, bare / PAIR |"
        + (" floor | PAIR / floor |" if args.floor else "")
    )
    print("|---|--:|--:|--:|--:|---|" + ("--:|--:|" if args.floor else ""))
    print("\n".join(rows))
    return 0


def row(kind: str, level: int, counted: dict[str, tuple[int, int]], requests: int) -> str:
    (bare, bare_chunks), (pair, pair_chunks) = counted["bare"], counted["PAIR"]
    chunks = "-"
    if kind == "stream" and bare_chunks and pair_chunks:
        chunks = f"{bare / bare_chunks:,.0f} / {pair / pair_chunks:,.0f}"
    line = (
        f"| {kind} | {level} | {bare / requests:,.0f} | {pair / requests:,.0f} "
        f"| {pair / bare:.2f}x | {chunks} |"
    )
    if "floor" in counted:
        floor = counted["floor"][0]
        line += f" {floor / requests:,.0f} | {pair / floor:.2f}x |"
    return line


if __name__ == "__main__":
    sys.exit(main())
