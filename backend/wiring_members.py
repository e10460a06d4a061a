"""The broker's cluster-facing pieces, built for ``backend/wiring.py``: pairing and membership,
the member links (federation), the spread planner, and the node API with its telemetry."""

from __future__ import annotations

from backend import __version__
from backend.common import tls
from backend.components.cluster import rpc as cluster_rpc
from backend.components.cluster.component import ClusterComponent
from backend.components.cluster.members import Membership
from backend.components.cluster.service import ClusterService
from backend.components.discovery.component import DiscoveryComponent
from backend.components.engines.component import EnginesComponent
from backend.components.engines.ledger import EngineLedger
from backend.components.federation.addresses import MemberAddresses
from backend.components.federation.component import FederationComponent, MemberEnginesBoard
from backend.components.federation.link import LinkSinks
from backend.components.federation.server import MemberRpc
from backend.components.jobs.component import JobsComponent
from backend.components.nodeinfo import rpc as nodeinfo_rpc
from backend.components.nodeinfo.payload import NodeInfoSource, last_engine_models
from backend.components.nodeinfo.server import NodeApiServer
from backend.components.nodeinfo.telemetry import TelemetryComponent
from backend.components.proxy.component import ProxyComponent
from backend.components.split.component import SpreadComponent, SpreadSources
from backend.components.split.lender import RpcServerLender
from backend.components.split.tunnel_listener import MemberDialer
from backend.components.split.tunnel_server import RpcTunnels
from backend.core.rpc import NumberedStream
from backend.protocol import methods
from backend.wiring_base import Foundation, Services, published_ports


def cluster(base: Foundation, services: Services, board: MemberEnginesBoard) -> ClusterComponent:
    events = NumberedStream(methods.CLUSTER_EVENT, services.hub)
    service = ClusterService(
        node_id=base.identity.node_id,
        name=services.node_name,
        node_port=lambda: base.config.ports.node,
        credentials=base.credentials.credentials,
        key_protection=base.credentials.protected_by,
        members=base.members,
        clock=base.clock,
        events=events,
        online=board.reachable,
    )
    board.on_presence(service.presence_changed)
    cluster_rpc.register(services.dispatcher, service, events)
    return ClusterComponent(service, clock=base.clock)


def federation(
    base: Foundation,
    services: Services,
    cluster: ClusterService,
    discovery: DiscoveryComponent,
    jobs: JobsComponent,
    board: MemberEnginesBoard,
) -> tuple[FederationComponent, MemberRpc]:
    """The member links: this node's calls to other members and the mirrors of their engines,
    errors and jobs; and the link route other members call this node's methods on."""
    node_id = base.identity.node_id
    addresses = MemberAddresses(discovery.nodes)
    sinks = LinkSinks(
        engines=board.changed,
        errors=services.errors.replace_node,
        jobs=jobs.mirror_jobs,
        job_removed=jobs.mirror_removed,
    )
    federation = FederationComponent(
        node_id=node_id,
        credentials=base.credentials.credentials,
        membership=lambda: cluster.membership,
        addresses=addresses,
        sinks=sinks,
        board=board,
        clock=base.clock,
    )
    cluster.on_trust_changed(federation.trust_changed)
    services.dispatcher.forward((*methods.FORWARDED, methods.ERRORS_CLEAR), federation.forward)
    member_rpc = MemberRpc(
        node_id=node_id, dispatcher=services.dispatcher, hub=services.hub, cluster=cluster
    )
    return federation, member_rpc


def spread(
    base: Foundation,
    services: Services,
    cluster: ClusterService,
    board: MemberEnginesBoard,
    discovery: DiscoveryComponent,
    telemetry: TelemetryComponent,
) -> SpreadComponent:
    """llama.cpp's launch planner: GPU offload here, or a model spread over members."""
    sources = SpreadSources(
        node_id=base.identity.node_id,
        name=services.node_name,
        telemetry=telemetry.view,
        membership=lambda: cluster.membership,
        reachable=board.reachable,
        nodes=discovery.nodes,
    )
    spread = SpreadComponent(
        sources, MemberDialer(base.credentials.credentials, MemberAddresses(discovery.nodes))
    )
    cluster.on_trust_changed(lambda _: spread.host.members_changed())
    board.on_presence(spread.host.members_changed)
    return spread


def _pins(membership: Membership) -> list[bytes]:
    """Every certificate the node API lets in: members, provisional ones too (their hello)."""
    return [member.cert_der for member in membership.members.values()]


def node_api(
    base: Foundation,
    services: Services,
    engines: EnginesComponent,
    jobs: JobsComponent,
    proxy: ProxyComponent,
    cluster: ClusterService,
    member_rpc: MemberRpc,
    rpc_server: RpcServerLender,
) -> tuple[TelemetryComponent, NodeApiServer]:
    telemetry = TelemetryComponent(clock=base.clock)
    node_id = base.identity.node_id
    source = NodeInfoSource(
        node_id=node_id,
        version=__version__,
        ports=lambda: published_ports(base.config.ports, proxy),
        name=services.node_name,
        telemetry=telemetry.view,
        engine_models=lambda: last_engine_models(engines),
        pending_jobs=lambda: jobs.pending_by_node().get(node_id, 0),
        fingerprint=base.credentials.credentials.fingerprint,
    )
    nodeinfo_rpc.register(services.dispatcher, source)
    pinned = tls.PinnedServer(base.credentials.credentials, _pins(cluster.membership))
    cluster.on_trust_changed(lambda membership: pinned.set_pins(_pins(membership)))
    tunnels = RpcTunnels(cluster=cluster, rpc_server=rpc_server)
    server = NodeApiServer(
        port=base.config.ports.node,
        source=source,
        ssl_context=pinned.context,
        cluster=cluster,
        routes=(member_rpc.add_routes, tunnels.add_routes),
        public_network=lambda: services.settings.view().public_network,
    )
    return telemetry, server


def rpc_server(base: Foundation, engines: EnginesComponent) -> RpcServerLender:
    """This computer's rpc-server, from the llama.cpp build the engines found."""
    return RpcServerLender(
        llama_server=lambda: engines.binary("llamacpp"),
        data_dir=base.config.data_dir,
        ledger=EngineLedger(base.store, base.clock),
    )
