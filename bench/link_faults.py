"""How long a client at A's door waits when the link to a member dies, and what it is told.

    sudo .venv/bin/python bench/link_faults.py [--rounds 5] [--concurrency 4]

Three brokers in network namespaces on a bridge (as ``tests/integration/cluster/
test_link_faults.py`` makes them): A with no engine, B with every model on an emulated Ollama,
C with ``slow-start`` too (B alone has ``b-slow-start``). For each fault, ``--rounds`` rounds
of ``--concurrency`` requests (20 runs by default), each round on a cluster healed from the
last:

- blackhole before first byte: requests wait on B (``b-slow-start``: its first token after
  10 s, and only B has it) when a blackhole route on B towards A is added;
- blackhole mid-stream: streams flowing from B (``flowing``) when the route is added;
- link down: as the first, with the bridge's end of B's link set down instead;
- failover to C: as the first, with A pinned to B and C having the model (the answer then
  includes C's own 10 s to its first token);
- healing: after each round's fault is undone, until A's door serves B's model again.

Times run from the fault (or its undoing) to the end of the client's answer; a client gives up
after 40 s. Prints a markdown table: p50 and max of those times, and what the clients saw.
Needs root and ``ip netns``; every namespace, route and process it made is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backend.protocol import methods  # noqa: E402
from tests.integration.cluster import test_link_faults as lf  # noqa: E402
from tests.integration.cluster.test_three_nodes import Host, _until  # noqa: E402
from tests.integration.discovery.test_multicast_netns import _ip, _netns_available  # noqa: E402
from tests.support.namespace_brokers import NamespaceBrokers  # noqa: E402
from tests.support.netfaults import LinkFaults, link_faults  # noqa: E402

SUBNET = "10.79.0"  # apart from the test suite's 10.78.N
FAULTS = ("blackhole before first byte", "blackhole mid-stream", "link down", "failover to C")
HEALING = "healing after the fault is undone"


@dataclass
class Outcomes:
    """Per fault: seconds until each client's answer ended, and what each client saw."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    seen: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )

    def add(self, fault: str, seconds: float | None, what: str) -> None:
        """One client's answer (``seconds`` None: none within its timeout)."""
        if seconds is not None:
            self.seconds[fault].append(seconds)
        self.seen[fault][what] += 1


def described(seen: lf.Seen) -> str:
    """What a client saw, in a table cell: status and, for a stream, how it ended."""
    if seen.seconds is None:
        return f"no answer within {lf.CLIENT_TIMEOUT_S:g} s"
    if seen.status != 200:
        return f"{seen.status}" + (" + Retry-After" if seen.retry_after else "")
    records = [json.loads(line) for line in seen.lines if line.strip()]
    if records and "error" in records[-1]:
        return "200, stream ended with an error record"
    if records and records[-1].get("done"):
        return "200, done"
    return "200, ended without done or error"


@contextlib.contextmanager
def namespaces() -> Iterator[list[Host]]:
    """Three namespaces on a bridge of their own; all removed on the way out."""
    tag = f"{os.getpid() % 100000:05d}"
    bridge, made = f"plb{tag}", []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "type", "bridge", "mcast_snooping", "0")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for index in (1, 2, 3):
            made.append(Host(f"plns{tag}{index}", f"{SUBNET}.{10 + index}"))
            _namespace(made[-1], bridge, f"{tag}{index}")
        yield made
    finally:
        for host in made:
            subprocess.run(["ip", "netns", "del", str(host.namespace)], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


def _namespace(host: Host, bridge: str, tag: str) -> None:
    """``host``'s namespace, its end of a veth on ``bridge`` named eth0, its address."""
    namespace, outer, inner = str(host.namespace), f"plh{tag}", f"pln{tag}"
    _ip("netns", "add", namespace)
    _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
    _ip("link", "set", inner, "netns", namespace)
    _ip("link", "set", outer, "master", bridge)
    _ip("link", "set", outer, "up")
    _ip("-n", namespace, "link", "set", inner, "name", "eth0")
    _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
    for device in ("eth0", "lo"):
        _ip("-n", namespace, "link", "set", device, "up")
    _ip("-n", namespace, "route", "add", "224.0.0.0/4", "dev", "eth0")  # mDNS


Answers = list[tuple[lf.Seen, float]]  # what each client saw, and when the fault struck


async def round_waiting(
    cluster: lf.Cluster, fault: Callable[[], object], count: int, model: str
) -> Answers:
    """``count`` requests for ``model`` wait on B; ``fault`` strikes; each answer with its time
    from it."""
    async with asyncio.TaskGroup() as group:
        asked = [group.create_task(lf.ask_from_a(cluster, model)) for _ in range(count)]
        await _until(
            cluster.clients[1],
            methods.JOBS_GET_INITIAL,
            lambda s: sum(j.model == model and j.state == "running" for j in s.jobs) >= count,
        )
        struck = time.monotonic()
        fault()
    return [(task.result(), struck) for task in asked]


async def round_streaming(cluster: lf.Cluster, fault: Callable[[], object], count: int) -> Answers:
    """``count`` streams flow from B; ``fault`` strikes; each end with its time from it."""
    flowing = [threading.Event() for _ in range(count)]
    async with asyncio.TaskGroup() as group:
        options = {"stream": True, "tokens": lf.REPLY_TOKENS}
        asked = [
            group.create_task(lf.ask_from_a(cluster, lf.FLOWING, **options, flowing=event))
            for event in flowing
        ]
        for event in flowing:
            await asyncio.to_thread(event.wait, 60)
        struck = time.monotonic()
        fault()
    return [(task.result(), struck) for task in asked]


async def heal(cluster: lf.Cluster, undone_at: float) -> tuple[float | None, str]:
    """Seconds from ``undone_at`` until A's door serves B's own model again, and the answer."""
    while True:
        seen = await lf.ask_from_a(cluster, lf.FLOWING)
        if seen.status == 200 or time.monotonic() - undone_at > 60:
            break
        await asyncio.sleep(0.2)
    return (seen.ended_at - undone_at if seen.status == 200 else None), described(seen)


async def measure(cluster: lf.Cluster, faults: LinkFaults, rounds: int, count: int) -> Outcomes:
    """Every fault, ``rounds`` times, then its healing; the outcomes."""
    outcomes = Outcomes()
    a, b = cluster.nodes[0], cluster.nodes[1]
    made: list[Any] = []

    def route() -> None:
        made.append(faults.blackhole(on=str(b.host.namespace), towards=a.host.address))

    def down() -> None:
        made.append(faults.link_down(str(b.host.namespace)))

    plans: dict[str, Callable[[], Awaitable[Answers]]] = {
        FAULTS[0]: lambda: round_waiting(cluster, route, count, lf.WAITING_ON_B),
        FAULTS[1]: lambda: round_streaming(cluster, route, count),
        FAULTS[2]: lambda: round_waiting(cluster, down, count, lf.WAITING_ON_B),
        FAULTS[3]: lambda: round_waiting(cluster, route, count, lf.WAITING),
    }
    for name, plan in plans.items():
        if name == FAULTS[3]:
            pin = {"values": {"proxy_pinned_node": cluster.ids[1]}}
            await cluster.clients[0].call(methods.SETTINGS_SET, pin)
        for number in range(rounds):
            for seen, struck in await plan():
                outcomes.add(
                    name, seen.ended_at - struck if seen.seconds else None, described(seen)
                )
            faults.restore(made.pop())
            seconds, what = await heal(cluster, time.monotonic())
            outcomes.add(HEALING, seconds, what)
            print(f"{name}: round {number + 1}/{rounds} done", file=sys.stderr, flush=True)
    return outcomes


def table(outcomes: Outcomes) -> list[str]:
    """The markdown table: per fault, runs, p50 and max seconds, what the clients saw."""
    lines = [
        "| fault | runs | p50 s | max s | what the client saw |",
        "|---|---:|---:|---:|---|",
    ]
    for name in (*FAULTS, HEALING):
        times, seen = outcomes.seconds[name], outcomes.seen[name]
        p50 = f"{statistics.median(times):.1f}" if times else "-"
        high = f"{max(times):.1f}" if times else "-"
        what = "; ".join(f"{text} x{n}" for text, n in seen.most_common())
        lines.append(f"| {name} | {sum(seen.values())} | {p50} | {high} | {what} |")
    return lines


@contextlib.asynccontextmanager
async def cluster_up(root: Path, hosts: list[Host]) -> AsyncIterator[lf.Cluster]:
    """A, B and C running and paired (B and C serve), stopped on the way out."""
    brokers = NamespaceBrokers(root)
    try:
        async with lf.cluster_of(brokers.start, root, hosts, members=2) as cluster:
            yield cluster
    finally:
        brokers.stop_all()


async def run(options: argparse.Namespace) -> list[str]:
    """Bring the cluster up, measure, and return the table."""
    with (
        tempfile.TemporaryDirectory(prefix="pair-link-faults-") as folder,
        namespaces() as hosts,
        link_faults() as faults,
    ):
        async with cluster_up(Path(folder), hosts) as cluster:
            outcomes = await measure(cluster, faults, options.rounds, options.concurrency)
    return table(outcomes)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table; 2 when this machine cannot make namespaces."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per fault (default 5)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests per round (4)")
    options = parser.parse_args(argv)
    reason = _netns_available()
    if reason is not None:
        print(f"bench/link_faults.py needs root and network namespaces: {reason}", file=sys.stderr)
        return 2
    began = time.monotonic()
    lines = asyncio.run(run(options))
    print("\n".join(lines))
    runs = f"{options.rounds} rounds x {options.concurrency} requests per fault"
    print(f"\n({runs}, {time.monotonic() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
