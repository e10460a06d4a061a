"""In-process nodes for the membership tests: real node APIs over TLS on loopback, real SQLite
stores, the real PAKE and roster exchange; a node can be restarted over the same files.

A node's node-info lists the ``engines`` it was started with; by default loopback clients count
as this computer (and see them), as in the product; ``this_computer`` stands in for another
computer on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
from aiohttp import web

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.common.tasks import TaskSet
from backend.components.cluster import peer_client
from backend.components.cluster.component import ClusterComponent
from backend.components.cluster.members import Members, MemberStore
from backend.components.cluster.service import ClusterService
from backend.components.identity.certificate import mint
from backend.components.nodeinfo.payload import NodeInfoSource
from backend.components.nodeinfo.server import build_app, is_loopback
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.core.clock import SystemClock
from backend.core.rpc import ClientHub, NumberedStream
from backend.core.store import Store
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.cluster import InviteChanged
from backend.protocol.types.nodes import NodeEngineModels, NodeInfo, NodeOs
from tests.fakes import FakeClock
from tests.support.ports import free_port

A_ID = NodeId("aaaaaaaa-0000-4000-8000-000000000001")
B_ID = NodeId("bbbbbbbb-0000-4000-8000-000000000002")
C_ID = NodeId("cccccccc-0000-4000-8000-000000000003")
D_ID = NodeId("dddddddd-0000-4000-8000-000000000004")


class _Recorder(NumberedStream[object]):
    """A stream that keeps what it published (nobody subscribes in these tests)."""

    def __init__(self, sink: list[object]) -> None:
        super().__init__(methods.CLUSTER_EVENT, ClientHub())  # type: ignore[arg-type]
        self._sink = sink

    def publish(self, make_event: object) -> None:
        self.seq += 1
        self._sink.append(make_event(self.seq))  # type: ignore[operator]


@dataclass
class Node:
    """One node: its service, its TLS listener, its store, and (when running) its component."""

    name: str
    node_id: NodeId
    port: int
    credentials: NodeCredentials
    service: ClusterService
    pinned: tls.PinnedServer
    runner: web.AppRunner
    store: Store
    db_path: Path
    clock: FakeClock
    published: list[object] = field(default_factory=list)
    tasks: TaskSet | None = None
    component: ClusterComponent | None = None
    engines: Mapping[str, NodeEngineModels] = field(default_factory=dict)
    this_computer: Callable[[str | None], bool] = is_loopback

    def invites(self) -> list[InviteChanged]:
        """The invite events this node published, in order."""
        return [event for event in self.published if isinstance(event, InviteChanged)]

    def trusts(self, other: Node) -> bool:
        """Whether this node's API lets ``other`` in (its certificate is pinned)."""
        member = self.service.membership.pin_for(other.credentials.cert_der)
        return member is not None and self.pinned.is_pinned(other.credentials.cert_der)


async def start_node(
    root: Path,
    name: str,
    clock: FakeClock,
    node_id: NodeId,
    *,
    credentials: NodeCredentials | None = None,
    port: int | None = None,
    engines: Mapping[str, NodeEngineModels] | None = None,
    this_computer: Callable[[str | None], bool] = is_loopback,
) -> Node:
    credentials = credentials or mint(node_id)
    engines = dict(engines or {})
    port = port or free_port()
    db_path = root / name / "pair.db"
    store = Store(db_path)
    await store.open()
    members = Members(MemberStore(store))
    await members.open()
    published: list[object] = []
    service = ClusterService(
        node_id=node_id,
        name=lambda: name,
        node_port=lambda: port,
        credentials=credentials,
        key_protection="file",
        members=members,
        clock=clock,
        events=_Recorder(published),  # type: ignore[arg-type]
    )
    pinned = tls.PinnedServer(credentials, (m.cert_der for m in members.current.members.values()))
    service.on_trust_changed(lambda ms: pinned.set_pins(m.cert_der for m in ms.members.values()))
    source = NodeInfoSource(
        node_id=node_id,
        version="test",
        ports=lambda: Ports(node=port, ollama=1, openai=2, llamacpp=3),
        name=lambda: name,
        telemetry=TelemetryView,
        engine_models=lambda: engines,
        os=NodeOs(system="Linux"),
        fingerprint=credentials.fingerprint,
    )
    app = build_app(source, service, this_computer=this_computer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=pinned.context).start()
    return Node(
        name,
        node_id,
        port,
        credentials,
        service,
        pinned,
        runner,
        store,
        db_path,
        clock,
        published,
        engines=engines,
        this_computer=this_computer,
    )


async def serve_routes(
    node: Node, add_routes: Callable[[web.Application], None], *, host: str = "127.0.0.1"
) -> tuple[web.AppRunner, int]:
    """A second port of ``node`` on ``host``: its node info plus ``add_routes``, over its
    pinned TLS."""
    source = NodeInfoSource(
        node_id=node.node_id,
        version="test",
        ports=lambda: Ports(node=node.port, ollama=1, openai=2, llamacpp=3),
        name=lambda: node.name,
        telemetry=TelemetryView,
        engine_models=dict,
        os=NodeOs(system="Linux"),
        fingerprint=node.credentials.fingerprint,
    )
    app = build_app(source, node.service, routes=(add_routes,))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, host, port, ssl_context=node.pinned.context).start()
    return runner, port


async def run_component(node: Node) -> None:
    """Run the node's cluster component (invite clock and roster pushes) in the background."""
    node.component = ClusterComponent(node.service, clock=SystemClock(), tick=0.05)
    node.tasks = TaskSet(f"test:{node.name}")
    node.tasks.spawn(node.component.run(), name="cluster")


async def stop_node(node: Node) -> None:
    if node.component is not None and node.tasks is not None:
        await node.component.stop()
        await node.tasks.close(timeout=3.0)
        node.component = node.tasks = None
    await node.runner.cleanup()
    await node.store.close()


async def restart(node: Node, root: Path) -> Node:
    """The same node (identity, database file, port) started again from what it stored."""
    await stop_node(node)
    return await start_node(
        root,
        node.name,
        node.clock,
        node.node_id,
        credentials=node.credentials,
        port=node.port,
        engines=node.engines,
        this_computer=node.this_computer,
    )


async def pair(inviter: Node, joiner: Node) -> None:
    """Pair ``joiner`` into ``inviter``'s cluster with the right PIN."""
    joiner.service.open_join_window(10)
    created = await inviter.service.invite("127.0.0.1", joiner.port)
    assert created.invite.state == "pending", created.invite.reason
    paired = await joiner.service.accept(created.invite.id, created.pin)
    assert paired.state == "paired", paired.reason


async def member_post(client: Node, server: Node, path: str, body: bytes) -> tuple[int, object]:
    """POST ``body`` to ``server`` over mutual TLS as ``client``: the status and JSON answer."""
    context = tls.client_context(client.credentials, server.credentials.cert_der)
    return await _post(context, server, path, body)


async def anonymous_post(server: Node, path: str, body: bytes) -> tuple[int, object]:
    """POST ``body`` to ``server`` over TLS without a client certificate."""
    context = peer_client.pinned_anonymous_context(server.credentials.cert_der)
    return await _post(context, server, path, body)


async def member_node_info(client: Node, server: Node) -> NodeInfo:
    """``GET /v1/node-info`` from ``server`` over mutual TLS as ``client``."""
    return await _node_info(
        tls.client_context(client.credentials, server.credentials.cert_der), server
    )


async def anonymous_node_info(server: Node) -> NodeInfo:
    """``GET /v1/node-info`` from ``server`` over TLS without a client certificate."""
    return await _node_info(
        peer_client.pinned_anonymous_context(server.credentials.cert_der), server
    )


async def _node_info(context: object, server: Node) -> NodeInfo:
    url = f"https://127.0.0.1:{server.port}/v1/node-info"
    connector = aiohttp.TCPConnector(ssl=context)  # type: ignore[arg-type]
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as answer:
        assert answer.status == 200, answer.status
        return msgspec.json.decode(await answer.read(), type=NodeInfo)


async def _post(context: object, server: Node, path: str, body: bytes) -> tuple[int, object]:
    url = f"https://127.0.0.1:{server.port}{path}"
    connector = aiohttp.TCPConnector(ssl=context)  # type: ignore[arg-type]
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(url, data=body, headers={"Content-Type": "application/json"}) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (real time) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.02)
