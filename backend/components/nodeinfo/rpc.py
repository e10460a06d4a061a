"""JSON-RPC method of node info, for the GUI: the same payload as ``GET /v1/node-info``."""

from __future__ import annotations

from backend.components.nodeinfo.payload import NodeInfoSource
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.nodes import NodeInfo


def register(dispatcher: Dispatcher, source: NodeInfoSource) -> None:
    """Route ``nodeinfo:get``."""

    async def get(_: NoParams, __: RpcPeer) -> NodeInfo:
        return source.describe()

    dispatcher.add(methods.NODEINFO_GET, get)
