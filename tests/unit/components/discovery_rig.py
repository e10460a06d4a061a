"""What the discovery tests over the cluster harness share: quick timing, a node that answers as
another computer would, a discovery component that follows a harness node's membership, and a
component run for the length of a test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from backend.common.tasks import TaskSet
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import ManualNodeStore
from backend.components.discovery.state import EvictionPolicy
from backend.components.discovery.timing import DiscoveryTiming
from backend.components.errors.registry import ErrorsRegistry
from backend.core.clock import SystemClock
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeCpu, NodeInfo, NodeMemory, NodeOs
from tests.support.ports import free_port
from tests.unit.cluster.harness import Node

FAST = DiscoveryTiming(
    scan_interval=0.1,
    telemetry_interval=0.1,
    telemetry_backoff=(0.1,),
    manual_probe_interval=0.1,
    fetch_timeout=1.0,
    policy=EvictionPolicy(),
)


def bare_info(node_id: NodeId, name: str, version: str, ports: Ports, **fields: object) -> NodeInfo:
    """A node-info answer with nothing measured (no telemetry, no GPUs), plus ``fields``."""
    return NodeInfo(
        node_id=node_id,
        name=name,
        version=version,
        os=NodeOs(),
        cpu=NodeCpu(),
        memory=NodeMemory(),
        gpus=[],
        telemetry_valid=False,
        ports=ports,
        **fields,  # type: ignore[arg-type]
    )


def another_computer(_: str | None) -> bool:
    """Every harness node listens on loopback; this makes one tell its inventories only to
    members, as it would to a client on another computer."""
    return False


def discovery_of(node: Node, store: Store, *, follow_removals: bool = True) -> DiscoveryComponent:
    """A discovery (no mDNS, quick timing) for ``node`` that follows its membership live: its
    trusted members over mutual TLS and (``follow_removals``) its removals, which take the
    removed nodes' manual entries with them."""

    def removed() -> frozenset[str]:
        # Read live: each change of the membership is a new object.
        return node.service.membership.removed_node_ids() if follow_removals else frozenset()

    return DiscoveryComponent(
        node_id=node.node_id,
        ports=Ports(node=node.port, ollama=free_port(), openai=free_port(), llamacpp=free_port()),
        name=lambda: node.name,
        clock=SystemClock(),
        events=NumberedStream(methods.DISCOVERY_EVENT, ClientHub()),
        errors_sink=ErrorsRegistry(
            node_id=node.node_id, clock=SystemClock(), on_update=lambda _: None
        ),
        manual_store=ManualNodeStore(store),
        timing=FAST,
        use_mdns=False,
        members=lambda: node.service.membership.trusted(),
        removed=removed,
        credentials=node.credentials,
    )


@asynccontextmanager
async def run_discovery(component: DiscoveryComponent, store: Store) -> AsyncIterator[None]:
    """``component`` running (its own task) until the block ends; then it is stopped, its task
    waited for, and ``store`` (opened by the caller) closed."""
    tasks = TaskSet("test:discovery")
    tasks.spawn(component.run(), name="discovery")
    try:
        yield
    finally:
        await component.stop()
        await tasks.close(timeout=3.0)
        await store.close()
