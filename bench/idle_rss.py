"""Memory and CPU at rest: a fresh ``pair node``'s broker and proxy worker, idle.

Starts ``python -m backend node`` on a temporary data dir with free ports (no engine, mDNS off
unless ``--mdns``, keys in files so this computer's keyring is never touched) once to cache the
bytecode of what it imports (an installed PAIR has it; this tree may not), then again on another
fresh data dir: waits until that broker says it is ready, lets it idle ``--idle`` seconds, then
prints the resident set (``VmRSS``, with its anonymous and file-backed parts, and the peak
``VmHWM``) of the broker and of its proxy worker from ``/proc``, and the CPU each used over the
next ``--cpu-window`` seconds (``/proc/PID/task/*/schedstat``, nanoseconds; a thread that ends
in the window is not counted), with how many times a second its threads were run (schedstat's
third field: each wake from a wait is one). The run count is the figure to compare across
hours: on this VM the CPU time charged for a wake-up varies tenfold with the host's load (an
empty asyncio loop woken ten times a second was charged 4 to 40 ms a second), the count does
not. With ``--starts N`` it first starts N more nodes one after another and prints the median
CPU each process had used by the time its broker said it was ready (the broker's from its
exec, the worker's from its spawn: imports, composition, listeners) and the median wall time
from exec to ready. Then the worker's start as
``python -X importtime`` sees it (``pair worker proxy --help`` imports what the worker serves
with and stops before serving): how many modules, and the heaviest by cumulative import time.

Linux only (``/proc``). The broker is started in its own session and stopped by its PID
(SIGTERM, then SIGKILL after a grace); its worker ends with it.

    python bench/idle_rss.py [--idle 10] [--cpu-window 20] [--imports 15] [--mdns] [--starts 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.core.processes import child_env, child_preexec, stop_child  # noqa: E402
from backend.devtools.demo import free_port, wait_broker_ready  # noqa: E402

LISTENERS = ("node", "relay", "ollama", "openai", "llamacpp")
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
WORKER_TIMEOUT_S = 30.0
FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


@dataclass(frozen=True)
class Memory:
    """One process's resident memory, in kB as ``/proc/PID/status`` gives it."""

    pid: int
    kb: dict[str, int]

    def row(self, name: str) -> str:
        """A markdown table row, in MiB."""
        cells = " | ".join(f"{self.kb[field] / 1024:.1f}" for field in FIELDS)
        return f"| {name} | {self.pid} | {cells} |"


def read_memory(pid: int) -> Memory:
    """``FIELDS`` of ``/proc/PID/status``."""
    kb: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in FIELDS:
            kb[key] = int(value.split()[0])
    return Memory(pid, kb)


def cpu_ns(pid: int) -> tuple[int, int]:
    """The CPU time every thread of ``pid`` has had so far, in nanoseconds, and how many
    times its threads were put on a CPU."""
    total = runs = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            fields = (task / "schedstat").read_text().split()
            total += int(fields[0])
            runs += int(fields[2])
    return total, runs


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far, its ended threads included
    (``/proc/PID/stat``, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Rest:
    """What an idle node's two processes used: memory, and CPU in ms a second."""

    broker: Memory
    worker: Memory
    broker_cpu: float
    worker_cpu: float
    broker_runs: float
    worker_runs: float


def children(pid: int) -> list[int]:
    """The direct children of ``pid``, from every one of its threads."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found += [int(child) for child in text.split()]
    return found


def is_proxy_worker(pid: int) -> bool:
    """Whether ``pid`` runs ``pair worker proxy`` (or ``python -m backend.workers.proxy``)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [word.decode(errors="replace") for word in argv]
    return ("worker" in words and "proxy" in words) or "backend.workers.proxy" in words


async def find_worker(broker: int) -> int:
    """The broker's proxy worker, once it runs."""
    for _ in range(int(WORKER_TIMEOUT_S * 10)):
        workers = [pid for pid in children(broker) if is_proxy_worker(pid)]
        if workers:
            return workers[0]
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no proxy worker under broker {broker}")


async def wait_ready(broker: asyncio.subprocess.Process, data_dir: Path) -> None:
    """Return once the broker says it is ready; retried while its control socket is not there."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if broker.returncode is not None:
            raise RuntimeError(f"the broker exited with {broker.returncode}")
        try:
            await wait_broker_ready(data_dir, timeout=2)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.1)
        else:
            return
    raise TimeoutError("the broker was not ready")


def node_environment(pycache: Path, mdns: bool) -> dict[str, str]:
    """The node's environment: keys in files, mDNS as asked, and bytecode cached in ``pycache``
    (as an installed PAIR has it, whatever ``PYTHONDONTWRITEBYTECODE`` this shell sets)."""
    environment = child_env(
        {
            "PAIR_KEYRING": "off",
            "PAIR_DISCOVERY_MDNS": "1" if mdns else "0",
            "PYTHONPYCACHEPREFIX": str(pycache),
        }
    )
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


@dataclass(frozen=True)
class Start:
    """One node's start: seconds from the broker's exec to its ready, and the CPU seconds its
    broker and its worker had used by then."""

    wall_s: float
    broker_cpu_s: float
    worker_cpu_s: float


@contextlib.asynccontextmanager
async def running_node(root: Path, environment: dict[str, str]) -> AsyncIterator[int]:
    """A broker on a fresh data dir under ``root`` and free ports, ready; yields its PID."""
    async with started_node(root, environment) as (pid, _):
        yield pid


@contextlib.asynccontextmanager
async def started_node(root: Path, environment: dict[str, str]) -> AsyncIterator[tuple[int, float]]:
    """``running_node``, yielding the broker's PID and the seconds from its exec to ready."""
    data_dir = Path(tempfile.mkdtemp(prefix="node-", dir=root))
    taken: set[int] = set()
    argv = [sys.executable, "-m", "backend", "node", "--data-dir", str(data_dir)]
    for listener in LISTENERS:
        argv += [f"--{listener}-port", str(free_port(taken))]
    with (data_dir.parent / f"{data_dir.name}.log").open("ab") as log:
        spawned = time.perf_counter()
        broker = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=environment,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=child_preexec(),
        )
    try:
        await wait_ready(broker, data_dir)
        yield broker.pid, time.perf_counter() - spawned
    finally:
        await stop_child(broker, grace=STOP_GRACE_S, close_stdin=False)


async def measure_node(root: Path, idle_s: float, window_s: float, mdns: bool) -> Rest:
    """Start a node once to fill the bytecode cache, then again: let that one idle ``idle_s``
    seconds once ready, read its broker's and worker's memory, then their CPU over
    ``window_s`` seconds."""
    environment = node_environment(root / "pycache", mdns)
    async with running_node(root, environment):
        pass
    async with running_node(root, environment) as broker:
        worker = await find_worker(broker)
        await asyncio.sleep(idle_s)
        memory = read_memory(broker), read_memory(worker)
        before = cpu_ns(broker), cpu_ns(worker)
        await asyncio.sleep(window_s)
        after = cpu_ns(broker), cpu_ns(worker)
        pairs = list(zip(before, after, strict=True))
        per_s = [(end[0] - start[0]) / 1e6 / window_s for start, end in pairs]
        runs = [(end[1] - start[1]) / window_s for start, end in pairs]
        return Rest(memory[0], memory[1], per_s[0], per_s[1], runs[0], runs[1])


async def measure_starts(root: Path, count: int, mdns: bool) -> list[Start]:
    """``count`` nodes started one after another (the bytecode cached by a first one)."""
    environment = node_environment(root / "pycache", mdns)
    async with running_node(root, environment):
        pass
    starts: list[Start] = []
    for _ in range(count):
        async with started_node(root, environment) as (broker, wall_s):
            worker = await find_worker(broker)
            starts.append(Start(wall_s, process_cpu_s(broker), process_cpu_s(worker)))
    return starts


def starts_report(starts: list[Start]) -> str:
    """The medians of ``starts``, one line."""
    wall = statistics.median(start.wall_s for start in starts)
    broker = statistics.median(start.broker_cpu_s for start in starts)
    worker = statistics.median(start.worker_cpu_s for start in starts)
    return (
        f"Start to ready, median of {len(starts)}: {wall:.2f} s wall; CPU used by then: broker "
        f"{broker:.3f} s, proxy worker {worker:.3f} s."
    )


def worker_imports(pycache: Path) -> list[tuple[str, int]]:
    """Every module the worker's start imports, with its cumulative import time in µs (from
    bytecode the node's runs cached)."""
    command = [sys.executable, "-X", "importtime", "-m", "backend", "worker", "proxy", "--help"]
    environment = node_environment(pycache, mdns=False)
    done = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, check=True
    )
    modules: list[tuple[str, int]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        modules.append((name.strip(), int(cumulative)))
    return modules


def report(rest: Rest, window_s: float, modules: list[tuple[str, int]], top: int) -> str:
    """The markdown the bench prints."""
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    together = rest.broker_cpu + rest.worker_cpu
    lines = [
        f"Idle RSS after the broker was ready (load average {load}), MiB:",
        "",
        "| process | pid | " + " | ".join(FIELDS) + " |",
        "|---|---|" + "---|" * len(FIELDS),
        rest.broker.row("broker"),
        rest.worker.row("proxy worker"),
        "",
        f"CPU at rest over the next {window_s:g} s: broker {rest.broker_cpu:.1f} ms/s, proxy "
        f"worker {rest.worker_cpu:.1f} ms/s; together {together / 10:.2f} % of a core (the "
        "product's target for the whole app, the GUI too: 1 %). Threads put on a CPU: "
        f"broker {rest.broker_runs:.1f}/s, proxy worker {rest.worker_runs:.1f}/s.",
        "",
        f"The worker's start imports {len(modules)} modules; heaviest (cumulative ms):",
        "",
    ]
    heaviest = sorted(modules, key=lambda module: module[1], reverse=True)[:top]
    lines += [f"- {name} {micros / 1000:.1f}" for name, micros in heaviest]
    return "\n".join(lines)


def main() -> int:
    """Run the measurement and print it."""
    if not sys.platform.startswith("linux"):
        print("idle_rss.py reads /proc: Linux only", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before reading")
    parser.add_argument(
        "--cpu-window", type=float, default=20.0, help="seconds over which CPU is read"
    )
    parser.add_argument("--imports", type=int, default=15, help="how many imports to list")
    parser.add_argument("--mdns", action="store_true", help="leave mDNS on, as a fresh node has")
    parser.add_argument("--starts", type=int, default=0, help="nodes to time from exec to ready")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pair-idle-rss-") as root:
        if arguments.starts > 0:
            starts = asyncio.run(measure_starts(Path(root), arguments.starts, arguments.mdns))
            print(starts_report(starts), end="\n\n", flush=True)
        rest = asyncio.run(
            measure_node(Path(root), arguments.idle, arguments.cpu_window, arguments.mdns)
        )
        modules = worker_imports(Path(root) / "pycache")
    print(report(rest, arguments.cpu_window, modules, arguments.imports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
