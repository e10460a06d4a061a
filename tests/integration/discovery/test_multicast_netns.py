"""Two brokers in two Linux network namespaces joined by a bridge find each other over real
mDNS; one is killed and is evicted within the (shortened) bound, then noticed again on restart.

Needs root and ``ip netns``; the fixture removes its namespaces and bridge even on failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, Broker, node_argv, wait_until_serving
from tests.integration.discovery.test_manual_nodes import FAST, by_id

pytestmark = pytest.mark.linux_only("network namespaces made with `ip netns`, as root")
SCAN_INTERVAL = float(FAST["PAIR_DISCOVERY_SCAN_INTERVAL"])
EVICT_AFTER = 12
# The first scan after the last answer consumes it, then twelve misses; plus one telemetry
# fetch timeout and scheduling slack.
EVICTION_BOUND_S = (EVICT_AFTER + 1) * SCAN_INTERVAL + 3.0 + 2.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _netns_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"pairprobe{os.getpid() % 100000}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` failed: {getattr(exc, 'stderr', b'')!r}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


@pytest.fixture
def namespaces() -> Iterator[list[tuple[str, str]]]:
    """Two namespaces with 10.77.0.11 and 10.77.0.12 on a private bridge: [(name, address)]."""
    reason = _netns_available()
    if reason is not None:
        pytest.skip(reason)
    tag = f"{os.getpid() % 100000:05d}"
    bridge = f"pbr{tag}"
    made: list[tuple[str, str]] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "type", "bridge", "mcast_snooping", "0")
        _ip("link", "set", bridge, "up")
        for index in (1, 2):
            namespace, address = f"pairns{tag}{index}", f"10.77.0.{10 + index}"
            host_end, inner_end = f"pvh{tag}{index}", f"pvn{tag}{index}"
            _ip("netns", "add", namespace)
            made.append((namespace, address))
            _ip("link", "add", host_end, "type", "veth", "peer", "name", inner_end)
            _ip("link", "set", inner_end, "netns", namespace)
            _ip("link", "set", host_end, "master", bridge)
            _ip("link", "set", host_end, "up")
            # Named like a physical NIC inside, so address ranking does not skip it as virtual.
            _ip("-n", namespace, "link", "set", inner_end, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", namespace, "route", "add", "224.0.0.0/4", "dev", "eth0")
        yield made
    finally:
        for namespace, _ in made:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


@pytest.fixture
def start_in_namespace(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start a broker inside a namespace (``ip netns exec`` execs it: the PID is the broker's);
    ``wait`` False: started, not yet serving (``wait_until_serving`` it)."""
    started: list[Broker] = []

    def start(namespace: str, data_dir: Path, *, wait: bool = True) -> Broker:
        stderr_path = tmp_path / f"{namespace}-{len(started)}.stderr"
        # An address change is announced at the next interface check: every second here.
        env = {**os.environ, **FAST, "PAIR_DISCOVERY_INTERFACE_INTERVAL": "1"}
        env.pop("PAIR_DISCOVERY_MDNS", None)
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                ["ip", "netns", "exec", namespace, *node_argv(data_dir)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        broker = Broker(process, data_dir, stderr_path)
        started.append(broker)
        if wait:
            wait_until_serving(broker)
        return broker

    yield start
    for broker in started:  # told at once, so their staged shutdowns overlap
        if broker.process.poll() is None:
            broker.process.send_signal(signal.SIGTERM)
    for broker in started:
        broker.stop()


async def _wait_for(
    client: Any, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float
) -> list[dict[str, Any]]:
    async with asyncio.timeout(timeout):
        while not predicate(nodes := await client.call("discovery:get-nodes")):
            await asyncio.sleep(0.1)
    return nodes


async def test_brokers_in_two_namespaces_find_each_other_evict_and_notice_a_restart(
    namespaces: list[tuple[str, str]],
    start_in_namespace: Callable[..., Broker],
    tmp_path: Path,
) -> None:
    (ns_a, address_a), (ns_b, address_b) = namespaces
    first = start_in_namespace(ns_a, tmp_path / "a", wait=False)
    second = start_in_namespace(ns_b, tmp_path / "b", wait=False)
    for broker in (first, second):  # their start-ups overlap
        wait_until_serving(broker)
    async with first.connect() as client, second.connect() as other:
        first_id = (await client.call("status"))["node_id"]
        second_id = (await other.call("status"))["node_id"]
        snapshot = await client.call("discovery:subscribe")
        # On a loaded machine the first may have found the second before subscribing: its
        # joining is then in the snapshot, not in the pushes.
        known_at_subscribe = by_id(snapshot["nodes"], second_id) is not None
        nodes = await _wait_for(client, lambda n: by_id(n, second_id) is not None, 20)
        seen = by_id(nodes, second_id)
        assert seen is not None and seen["sources"] == ["mdns"]
        assert seen["addresses"][0] == address_b and seen["reachable"]
        mine = by_id(nodes, first_id)
        assert mine is not None and mine["sources"] == ["self"]
        assert mine["addresses"] == [address_a]
        await _wait_for(other, lambda n: by_id(n, first_id) is not None, 20)

        second.process.send_signal(signal.SIGKILL)  # no goodbye: only probes can tell
        second.process.wait(10)
        killed_at = time.monotonic()
        await _wait_for(client, lambda n: by_id(n, second_id) is None, EVICTION_BOUND_S + 5)
        evicted_after = time.monotonic() - killed_at
        print(f"evicted {evicted_after:.1f} s after SIGKILL (bound {EVICTION_BOUND_S:.1f} s)")
        assert evicted_after <= EVICTION_BOUND_S
        assert evicted_after >= EVICT_AFTER * SCAN_INTERVAL - SCAN_INTERVAL

        restarted = start_in_namespace(ns_b, tmp_path / "b")
        back_at = time.monotonic()
        nodes = await _wait_for(client, lambda n: by_id(n, second_id) is not None, 20)
        print(f"restart noticed after {time.monotonic() - back_at:.1f} s")
        node = by_id(nodes, second_id)
        assert node is not None and node["sources"] == ["mdns"]
        left = [p for m, p in client.pushes if m == "discovery:event" and p["node_id"] == second_id]
        joined_first = [] if known_at_subscribe else ["node_joined"]
        assert [e["event"] for e in left if e["event"] in ("node_joined", "node_left")] == [
            *joined_first,
            "node_left",
            "node_joined",
        ]
        restarted.stop()


async def test_a_node_that_changes_address_keeps_its_identity(
    namespaces: list[tuple[str, str]],
    start_in_namespace: Callable[..., Broker],
    tmp_path: Path,
) -> None:
    (ns_a, _), (ns_b, address_b) = namespaces
    first = start_in_namespace(ns_a, tmp_path / "a", wait=False)
    second = start_in_namespace(ns_b, tmp_path / "b", wait=False)
    for broker in (first, second):  # their start-ups overlap
        wait_until_serving(broker)
    async with first.connect() as client, second.connect() as other:
        first_id = (await client.call("status"))["node_id"]
        await client.call("discovery:subscribe")
        second_id = (await other.call("status"))["node_id"]
        await _wait_for(client, lambda n: by_id(n, second_id) is not None, 20)
        await _wait_for(other, lambda n: by_id(n, first_id) is not None, 20)
        moved_to = "10.77.0.42"
        # Delete first: removing a subnet's primary address also removes its secondaries.
        _ip("-n", ns_b, "addr", "del", f"{address_b}/24", "dev", "eth0")
        _ip("-n", ns_b, "addr", "add", f"{moved_to}/24", "dev", "eth0")
        _ip("-n", ns_b, "route", "add", "224.0.0.0/4", "dev", "eth0")
        nodes = await _wait_for(
            client,
            lambda n: (
                (node := by_id(n, second_id)) is not None and node["addresses"][:1] == [moved_to]
            ),
            45,
        )
        assert [node["node_id"] for node in nodes].count(second_id) == 1
