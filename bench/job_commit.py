"""What making a job's end durable before its last byte costs a request: the proxy worker's
journal write (``channels/journal.py``), as ``JobLog.send`` does it for every job end.

    .venv/bin/python bench/job_commit.py [--ends 20000] [--fsync 200]

Appends ``--ends`` job ends (the ``JobEvent`` a completed job sends, as one JSON line) to a
real ``JobJournal`` in a temporary folder on this disk, segments sealed at their bounds as in
the worker, and times each ``append`` (the encode and the one ``os.write`` on the client's
path). Prints the median, p99 and max in microseconds. ``--fsync`` also times that many writes
each followed by ``os.fsync``, what surviving a power loss too would add to every answer (the
journal does not do it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.protocol.types.base import EngineName, JobKey, NodeId  # noqa: E402
from backend.protocol.types.jobs import JobEvent  # noqa: E402
from backend.workers.proxy.channels.journal import JobJournal  # noqa: E402


def _end(number: int) -> JobEvent:
    """A completed job's last event, as the worker sends it."""
    now = time.time()
    return JobEvent(
        key=JobKey(f"bench-node/run1/{number}"),
        seq=3,
        kind="completed",
        attempt=1,
        at=now,
        engine=EngineName("ollama"),
        model="llama3.2:3b-instruct-q4_K_M",
        origin=NodeId("bench-node"),
        run_id="run1",
        created_at=now,
        path="/api/chat",
        client="loopback",
        client_address="127.0.0.1",
    )


def _journal_writes(folder: Path, ends: int) -> list[float]:
    """Each append's time, in microseconds."""
    journal = JobJournal(folder / "journal", "run1")
    events = [_end(number) for number in range(ends)]
    times: list[float] = []
    for event in events:
        started = time.perf_counter_ns()
        journal.append(event)
        times.append((time.perf_counter_ns() - started) / 1000)
    journal.close()
    return times


def _fsynced_writes(folder: Path, writes: int) -> list[float]:
    """Each write followed by ``fsync``, in microseconds."""
    line = b'{"key":"bench-node/run1/1","seq":3,"kind":"completed"}\n'
    fd = os.open(folder / "fsynced.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times: list[float] = []
    try:
        for _ in range(writes):
            started = time.perf_counter_ns()
            os.write(fd, line)
            os.fsync(fd)
            times.append((time.perf_counter_ns() - started) / 1000)
    finally:
        os.close(fd)
    return times


def _report(what: str, times: list[float]) -> None:
    ordered = sorted(times)
    p99 = ordered[max(int(len(ordered) * 0.99) - 1, 0)]
    print(
        f"{what:<28} n={len(ordered):<6} p50={statistics.median(ordered):8.1f} us"
        f"  p99={p99:8.1f} us  max={ordered[-1]:9.1f} us"
    )


def main() -> int:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ends", type=int, default=20_000)
    parser.add_argument("--fsync", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pair-bench-") as folder:
        _report("journal append (os.write)", _journal_writes(Path(folder), args.ends))
        if args.fsync > 0:
            _report("write + fsync (not done)", _fsynced_writes(Path(folder), args.fsync))
    return 0


if __name__ == "__main__":
    sys.exit(main())
