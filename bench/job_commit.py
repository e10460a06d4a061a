"""What storing a job's end before its last byte costs a request: the wait for the broker's
``proxy:jobs-stored`` answer, as the proxy worker sees it.

    .venv/bin/python bench/job_commit.py [--requests 300] [--concurrency 1,8] [--gap-ms 5]

The broker's side runs here as in ``pair node``: the worker is a child process whose stdout is
read in paced bursts (``core/paced_pipe.py``, the proxy's 20 ms), job events go to a real
``JobsComponent`` on a SQLite store (WAL) in a temporary folder, and ``proxy:jobs-stored`` is
answered by ``wait_stored``. The child plays the worker: per request it sends the job's events
(one notification, as ``JobLog`` flushes a job's end), then times the call, as
``Job.wait_stored`` does before the answer's last byte. Prints the median and p99 of that wait,
in milliseconds, for each concurrency (requests in flight at once). ``--gap-ms`` is each
request's own time before its end: under the pace (20 ms) the broker is mostly in a pause when
a job ends, past it the pipe is watched again and the wait is the commit's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.components.jobs.component import JobsComponent  # noqa: E402
from backend.components.jobs.store import JobRecordStore  # noqa: E402
from backend.components.proxy.component import WORKER_READ_PACE_S  # noqa: E402
from backend.core.clock import SystemClock  # noqa: E402
from backend.core.paced_pipe import spawn_paced  # noqa: E402
from backend.core.rpc import ClientHub, NumberedStream  # noqa: E402
from backend.core.stdio import open_stdio_channel  # noqa: E402
from backend.core.store import Store  # noqa: E402
from backend.protocol import methods  # noqa: E402
from backend.protocol.peer import RpcPeer  # noqa: E402
from backend.protocol.types.base import EngineName, JobKey, NodeId  # noqa: E402
from backend.protocol.types.jobs import JobEvent, JobEvents  # noqa: E402
from backend.protocol.worker_methods import PROXY_JOBS, PROXY_JOBS_STORED  # noqa: E402
from backend.workers.proxy.channels.jobs import STORED_WAIT_S  # noqa: E402


def _events(number: int) -> JobEvents:
    """A job's events as the worker sends them when it ends: submitted, started, completed."""
    now = time.time()
    common: dict[str, Any] = {
        "key": JobKey(f"bench/run/{number}"),
        "attempt": 1,
        "engine": EngineName("ollama"),
        "model": "m",
        "origin": NodeId("bench"),
        "run_id": "run",
        "created_at": now,
        "path": "/api/chat",
        "at": now,
    }
    return JobEvents(
        events=[
            JobEvent(seq=1, kind="submitted", target=NodeId("bench"), **common),
            JobEvent(seq=2, kind="started", node=NodeId("bench"), **common),
            JobEvent(seq=3, kind="completed", **common),
        ]
    )


async def _worker(requests: int, concurrency: int, first: int, gap_s: float) -> None:
    """The child: ``requests`` jobs, ``concurrency`` at a time; prints the waits (ms) as JSON."""
    reader, writer = await open_stdio_channel()
    peer = RpcPeer(reader, writer, name="bench-worker")
    running = asyncio.create_task(peer.run())
    waits: list[float] = []
    numbers = iter(range(first, first + requests))

    async def one_by_one() -> None:
        for number in numbers:
            await asyncio.sleep(gap_s)  # the request's own time: arrivals are not lock-stepped
            peer.notify(PROXY_JOBS.name, _events(number))
            started = time.perf_counter()
            await peer.call(PROXY_JOBS_STORED.name, timeout=STORED_WAIT_S)
            waits.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(one_by_one() for _ in range(concurrency)))
    print(json.dumps(waits), file=sys.stderr, flush=True)
    peer.close()
    await running


async def _broker(
    requests: int, concurrency: int, first: int, gap_s: float, folder: Path
) -> list[float]:
    """Run the child against a real jobs component; the waits it measured."""
    store = Store(folder / "pair.db")
    await store.open()
    jobs = JobsComponent(
        store=JobRecordStore(store),
        clock=SystemClock(),
        node_id="bench",
        events=NumberedStream(methods.JOBS_EVENT, ClientHub()),
    )

    def on_notification(method: str, params: Any, _: RpcPeer) -> None:
        for event in params["events"] if method == PROXY_JOBS.name else []:
            jobs.on_job_event(event)

    async def on_request(method: str, params: Any, _: RpcPeer) -> Any:
        await jobs.wait_stored()
        return {"ok": True}

    argv = [sys.executable, __file__, "--child"]
    argv += [str(requests), str(concurrency), str(first), str(gap_s)]
    child = await spawn_paced(
        argv,
        pace=WORKER_READ_PACE_S,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None and child.stderr is not None
    peer = RpcPeer(
        child.stdout,
        child.stdin,
        name="bench-broker",
        on_notification=on_notification,
        on_request=on_request,
    )
    serving = asyncio.create_task(peer.run())
    output = await child.stderr.read()
    await child.wait()
    peer.close()
    await serving
    await store.close()
    return [float(wait) for wait in json.loads(output.decode().strip().splitlines()[-1])]


def _report(concurrency: int, waits: list[float]) -> None:
    ordered = sorted(waits)
    p99 = ordered[max(int(len(ordered) * 0.99) - 1, 0)]
    median = statistics.median(ordered)
    print(
        f"concurrency {concurrency:<3} n={len(waits):<5} ack wait p50={median:6.2f} ms"
        f"  p99={p99:6.2f} ms  max={ordered[-1]:6.2f} ms"
    )


async def _main(requests: int, levels: list[int], gap_s: float) -> None:
    print(
        f"broker reads the worker's pipe every {WORKER_READ_PACE_S * 1000:g} ms at most; "
        f"{gap_s * 1000:g} ms per request before its end"
    )
    with tempfile.TemporaryDirectory(prefix="pair-bench-") as folder:
        first = 0
        for concurrency in levels:
            waits = await _broker(requests, concurrency, first, gap_s, Path(folder))
            _report(concurrency, waits)
            first += requests


def main() -> int:
    """Parse the arguments and run (or be the child)."""
    if sys.argv[1:2] == ["--child"]:
        requests, concurrency, first = (int(value) for value in sys.argv[2:5])
        asyncio.run(_worker(requests, concurrency, first, float(sys.argv[5])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    asyncio.run(_main(args.requests, levels, args.gap_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
