"""A broker's own entry in the discovery list comes from its node-info source in process
(``bind_self``), with no node API listening and no TLS handshake to itself, and follows each
telemetry interval; without it, the node API is asked over loopback as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import ManualNodeStore
from backend.components.discovery.timing import DiscoveryTiming
from backend.components.errors.registry import ErrorsRegistry
from backend.core.clock import SystemClock
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeInfo
from tests.support.ports import free_port
from tests.unit.cluster.harness import eventually
from tests.unit.components.discovery_rig import bare_info, run_discovery

SELF = NodeId("66666666-6666-4666-8666-666666666666")
TIMING = DiscoveryTiming(scan_interval=0.1, telemetry_interval=0.1)
PORTS = Ports(node=free_port(), ollama=free_port(), openai=free_port(), llamacpp=free_port())


def _info(name: str, pending: int) -> NodeInfo:
    return bare_info(SELF, name, "9.9.9", PORTS, pending_jobs=pending)


@asynccontextmanager
async def node_api_door() -> AsyncIterator[list[int]]:
    """A listener on the node API's port that counts connections and answers none."""
    connections: list[int] = []

    async def on_connection(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", PORTS.node)
    try:
        yield connections
    finally:
        server.close()
        await server.wait_closed()


class SleepLog(SystemClock):
    """The real clock, noting every wait asked of it."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


@asynccontextmanager
async def running(
    tmp_path: Path,
    describe: Callable[[], NodeInfo] | None,
    *,
    clock: SystemClock | None = None,
    timing: DiscoveryTiming = TIMING,
) -> AsyncIterator[DiscoveryComponent]:
    store = Store(tmp_path / "discovery.db")
    await store.open()
    component = DiscoveryComponent(
        node_id=SELF,
        ports=PORTS,
        name=lambda: "desk",
        clock=clock or SystemClock(),
        events=NumberedStream(methods.DISCOVERY_EVENT, ClientHub()),
        errors_sink=ErrorsRegistry(node_id=SELF, clock=SystemClock(), on_update=lambda _: None),
        manual_store=ManualNodeStore(store),
        timing=timing,
        use_mdns=False,
    )
    if describe is not None:
        component.bind_self(describe)
    async with run_discovery(component, store):
        yield component


async def test_the_own_entry_is_read_in_process_and_follows_each_interval(
    tmp_path: Path,
) -> None:
    current = {"info": _info("desk-one", 1)}
    reads: list[NodeInfo] = []

    def describe() -> NodeInfo:
        reads.append(current["info"])
        return current["info"]

    async with node_api_door() as connections, running(tmp_path, describe) as discovery:

        def own() -> list[tuple[str, bool, list[str], int | None]]:
            return [
                (
                    node.version or "",
                    node.reachable,
                    [str(source) for source in node.sources],
                    node.telemetry.pending_jobs if node.telemetry else None,
                )
                for node in discovery.nodes()
                if node.node_id == SELF
            ]

        await eventually(lambda: own() == [("9.9.9", True, ["self"], 1)])
        current["info"] = _info("desk-two", 4)
        await eventually(lambda: own() == [("9.9.9", True, ["self"], 4)])
        [entry] = [node for node in discovery.nodes() if node.node_id == SELF]
        assert entry.name == "desk-two"
        assert len(reads) >= 2
        assert connections == []  # never asked over the network


async def test_unbound_the_own_entry_is_asked_of_the_node_api(tmp_path: Path) -> None:
    async with node_api_door() as connections, running(tmp_path, None) as discovery:
        await eventually(lambda: len(connections) >= 2)
        # Nothing answered: the entry has no figures from the node API.
        assert all(node.telemetry is None for node in discovery.nodes() if node.node_id == SELF)


async def test_the_polls_wake_the_broker_once_each_not_on_a_tick(tmp_path: Path) -> None:
    """At rest a broker is woken by what is due, not by a fixed tick: with only its own entry
    polled, the telemetry loop waits once per poll, each wait until the next is due."""
    interval = 0.4
    quiet = DiscoveryTiming(scan_interval=60, manual_probe_interval=60, telemetry_interval=interval)
    reads: list[float] = []
    clock = SleepLog()

    def describe() -> NodeInfo:
        reads.append(clock.monotonic())
        return _info("desk", 0)

    async with running(tmp_path, describe, clock=clock, timing=quiet):
        await eventually(lambda: len(reads) >= 2)
        first, waits = len(reads), len(clock.sleeps)
        await asyncio.sleep(6 * interval)
        polled = len(reads) - first
    telemetry_waits = [s for s in clock.sleeps[waits:] if s < 60]
    assert polled >= 3
    # One wait per poll (give or take the ones in progress at either end), each most of the
    # interval long; a fixed tick of half the interval would have waited twice per poll.
    assert len(telemetry_waits) <= polled + 2, (telemetry_waits, polled)
    assert sum(telemetry_waits) >= 0.6 * interval * len(telemetry_waits)
