"""JSON-RPC methods of discovery: the node list (snapshot + numbered events) and manual nodes."""

from __future__ import annotations

from backend.components.discovery.component import DiscoveryComponent
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types import (
    DiscoveredNode,
    DiscoverySnapshot,
    ManualNode,
    ManualNodeAdd,
    ManualNodeRef,
)


def register(dispatcher: Dispatcher, discovery: DiscoveryComponent, events: NumberedStream) -> None:
    """Route ``discovery:*``, ``node/add``, ``node/remove`` and ``nodes/list``."""

    async def get_nodes(_: RpcPeer) -> list[DiscoveredNode]:
        return discovery.nodes()

    async def subscribe(peer: RpcPeer) -> DiscoverySnapshot:
        return DiscoverySnapshot(seq=events.subscribe(peer), nodes=discovery.nodes())

    async def unsubscribe(peer: RpcPeer) -> dict[str, bool]:
        events.unsubscribe(peer)
        return {"subscribed": False}

    async def add(params: ManualNodeAdd, _: RpcPeer) -> ManualNode:
        return await discovery.add_manual(params)

    async def remove(params: ManualNodeRef, _: RpcPeer) -> dict[str, bool]:
        await discovery.remove_manual(params.id)
        return {"removed": True}

    async def list_manual(_: RpcPeer) -> list[ManualNode]:
        return discovery.manual_nodes()

    dispatcher.add_plain(methods.DISCOVERY_GET_NODES, get_nodes)
    dispatcher.add_plain(methods.DISCOVERY_SUBSCRIBE, subscribe)
    dispatcher.add_plain(methods.DISCOVERY_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.NODE_ADD, add, ManualNodeAdd)
    dispatcher.add(methods.NODE_REMOVE, remove, ManualNodeRef)
    dispatcher.add_plain(methods.NODES_LIST, list_manual)
