"""JSON-RPC methods of discovery: the node list (snapshot + numbered events) and manual nodes."""

from __future__ import annotations

from backend.components.discovery.component import DiscoveryComponent
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.nodes import (
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    ManualNode,
    ManualNodeAdd,
    ManualNodeRef,
)
from backend.protocol.types.results import Removed, Unsubscribed


def register(
    dispatcher: Dispatcher, discovery: DiscoveryComponent, events: NumberedStream[DiscoveryEvent]
) -> None:
    """Route ``discovery:*``, ``nodes:add``, ``nodes:remove`` and ``nodes:list``."""

    async def get_nodes(_: NoParams, __: RpcPeer) -> list[DiscoveredNode]:
        return discovery.nodes()

    async def subscribe(_: NoParams, peer: RpcPeer) -> DiscoverySnapshot:
        return DiscoverySnapshot(seq=events.subscribe(peer), nodes=discovery.nodes())

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        events.unsubscribe(peer)
        return Unsubscribed()

    async def add(params: ManualNodeAdd, _: RpcPeer) -> ManualNode:
        return await discovery.add_manual(params)

    async def remove(params: ManualNodeRef, _: RpcPeer) -> Removed:
        await discovery.remove_manual(params.id)
        return Removed()

    async def list_manual(_: NoParams, __: RpcPeer) -> list[ManualNode]:
        return discovery.manual_nodes()

    dispatcher.add(methods.DISCOVERY_GET_NODES, get_nodes)
    dispatcher.add(methods.DISCOVERY_SUBSCRIBE, subscribe)
    dispatcher.add(methods.DISCOVERY_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.NODE_ADD, add)
    dispatcher.add(methods.NODE_REMOVE, remove)
    dispatcher.add(methods.NODES_LIST, list_manual)
