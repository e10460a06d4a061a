"""The Jobs page's model under 10,000 jobs: filter changes and bursts of job events.

Builds the real ``JobsModel`` + ``JobsFilterModel`` behind a shown ``QTableView`` (offscreen)
and prints the median and p99 milliseconds per filter change and per burst of upserts, with and
without the repaint that follows, against a 16 ms frame. Run by hand, never by pytest:

    .venv/bin/python bench/jobs_filter.py [--jobs 10000] [--rounds 200] [--burst 50]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from PySide6.QtWidgets import QApplication  # noqa: E402

from app.models.jobs import JobFilter, JobsFilterModel, JobsModel  # noqa: E402
from app.window.jobs_page import jobs_table  # noqa: E402
from backend.protocol.types.jobs import JobRecord, JobState  # noqa: E402

FRAME_MS = 16.0
Burst = JobRecord | str  # an upsert, or the key of a removed job
NODES = [f"{n:08x}-0000-4000-8000-000000000000" for n in range(1, 7)]
MODELS = ["llama3.1:8b", "qwen2.5-coder:14b", "gemma3:12b", "nomic-embed-text", "qwen3-30b-a3b"]
ENGINES = ["ollama", "lmstudio", "llamacpp"]
ERRORS = ["out of memory", "the stream ended before the final chunk", "no response headers"]
NOW = time.time()


def make_job(n: int, rng: random.Random, state: JobState | None = None) -> JobRecord:
    """Job ``n`` (a higher ``n`` is newer); without ``state``, a finished one (the history)."""
    state = state or rng.choices(("completed", "failed", "cancelled"), weights=(85, 10, 5))[0]
    created = NOW - 100_000 + n * 10
    node = rng.choice(NODES)
    started = created + rng.uniform(0.05, 2) if state != "in_flight" else None
    finished = state not in ("in_flight", "running")
    return JobRecord(
        key=f"{NODES[0]}/bench/{n}", engine=rng.choice(ENGINES), model=rng.choice(MODELS),
        origin=rng.choice(NODES[:2]), run_id="bench", state=state, created_at=created, seq=3,
        attempt=1, path="/api/chat", target=node, serving=node if started else None,
        started_at=started, completed_at=(started or created) + 5 if finished else None,
        error=rng.choice(ERRORS) if state == "failed" else None,
    )  # fmt: skip


def filters(rng: random.Random) -> list[JobFilter]:
    """Filter changes a user makes: state toggles, a node, an engine, typing and clearing."""
    kinds: list[JobFilter] = [
        JobFilter(states=frozenset({"failed"})),
        JobFilter(states=frozenset({"running", "in_flight"})),
        JobFilter(states=frozenset({"completed"})),
        JobFilter(node=rng.choice(NODES)),
        JobFilter(engine=rng.choice(ENGINES)),
        JobFilter(states=frozenset({"failed"}), engine="ollama", node=NODES[2]),
        JobFilter(),
    ]
    word = "qwen2.5-coder"
    kinds += [JobFilter(text=word[:end]) for end in range(1, len(word) + 1)]  # typing
    kinds += [JobFilter(text="memory"), JobFilter()]
    return kinds


def percentiles(samples: list[float]) -> tuple[float, float]:
    """Median and p99 (nearest rank) in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, max(0, round(len(ordered) * 0.99) - 1))]
    return statistics.median(ordered) * 1000, p99 * 1000


def timed(action: Callable[[], None], app: QApplication, *, repaint: bool) -> float:
    start = time.perf_counter()
    action()
    if repaint:
        app.processEvents()
    return time.perf_counter() - start


def report(name: str, samples: list[float]) -> None:
    median, p99 = percentiles(samples)
    verdict = "within" if p99 <= FRAME_MS else "OVER"
    print(f"| {name} | {len(samples)} | {median:.2f} | {p99:.2f} | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--burst", type=int, default=50)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    assert isinstance(app, QApplication)
    rng = random.Random(42)
    model = JobsModel()
    shown = JobsFilterModel(model)
    table = jobs_table(shown)
    table.resize(1100, 700)
    table.show()
    live = 20  # the newest jobs are the unfinished ones
    jobs = [make_job(n, rng) for n in range(args.jobs - live)]
    jobs += [make_job(n, rng, "running") for n in range(args.jobs - live, args.jobs)]
    start = time.perf_counter()
    model.reset(jobs)
    app.processEvents()
    print(f"{args.jobs} jobs, bursts of {args.burst} events, Python {sys.version.split()[0]}")
    print(f"snapshot of {args.jobs} jobs (reset + first paint): "
          f"{(time.perf_counter() - start) * 1000:.1f} ms\n")  # fmt: skip
    print("| operation | samples | median ms | p99 ms | p99 in a 16 ms frame |")
    print("|---|---|---|---|---|")
    changes = filters(rng)
    for repaint in (False, True):
        samples = []
        for round_ in range(args.rounds):
            change = changes[round_ % len(changes)]
            samples.append(timed(partial(shown.set_filter, change), app, repaint=repaint))
        report("filter change" + (" + repaint" if repaint else ""), samples)
    traffic = Traffic(model, rng, args.jobs)
    for active in (JobFilter(), JobFilter(states=frozenset({"running", "failed"}), text="q")):
        shown.set_filter(active)
        label = "filtered" if active.is_active else "unfiltered"
        for repaint in (False, True):
            samples = []
            for _ in range(args.rounds):
                burst = traffic.burst(args.burst)
                samples.append(timed(partial(apply, model, burst), app, repaint=repaint))
            name = f"burst of {args.burst} events, {label}" + (" + repaint" if repaint else "")
            report(name, samples)
    shown.set_filter(JobFilter())
    unfinished = sum(1 for job in model.rows() if job.state in ("in_flight", "running"))
    samples = [timed(model.tick, app, repaint=True) for _ in range(args.rounds)]
    report(f"duration tick ({unfinished} unfinished jobs) + repaint", samples)
    samples = [timed(table.viewport().repaint, app, repaint=False) for _ in range(args.rounds)]
    report("full repaint of the visible rows (reference)", samples)
    print(f"\n{model.rowCount()} jobs at the end; {shown.rowCount()} shown")
    table.close()


class Traffic:
    """What the broker pushes in a busy moment: new jobs arrive in flight, earlier ones start
    and finish, and as many of the oldest finished jobs are pruned as arrive."""

    def __init__(self, model: JobsModel, rng: random.Random, first: int) -> None:
        self._model = model
        self._rng = rng
        self._next = first
        self._unfinished: deque[JobRecord] = deque(
            job for job in reversed(model.rows()) if job.state in ("in_flight", "running")
        )

    def burst(self, size: int) -> list[Burst]:
        """``size`` events: a quarter new jobs, as many pruned, the rest progressing (each job
        starts, then finishes)."""
        arriving = size // 4
        events: list[Burst] = []
        for _ in range(arriving):
            job = make_job(self._next, self._rng, "in_flight")
            self._next += 1
            self._unfinished.append(job)
            events.append(job)
        for _ in range(min(size - 2 * arriving, len(self._unfinished))):
            job = self._unfinished.popleft()
            after: JobState = "running" if job.state == "in_flight" else "completed"
            moved = make_job(int(job.key.rsplit("/", 1)[1]), self._rng, after)
            if after == "running":
                self._unfinished.append(moved)
            events.append(moved)
        last = self._model.rowCount() - 1
        events += [self._model.row_at(last - n).key for n in range(arriving)]
        return events


def apply(model: JobsModel, burst: list[Burst]) -> None:
    for event in burst:
        if isinstance(event, str):
            model.remove(event)
        else:
            model.upsert(event)


if __name__ == "__main__":
    main()
