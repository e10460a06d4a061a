"""The member link's serving side: ``GET /v1/cluster/link`` on the node API, a WebSocket over
mutual TLS on which a member calls this broker's JSON-RPC methods.

A member may call only ``methods.MEMBER_METHODS``, and only for this node (a ``node`` other than
this one is refused: members do not relay for each other). Its calls go through the broker's
own dispatcher, so every rule a local request meets (adoption, loopback bind, desired state,
conflicts) is applied the same way and the answer or error goes back unchanged. The member's
connection joins the broker's clients, so it can follow the numbered streams and gets
``errors:update``; once the member is no longer trusted its connection is closed.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from backend.components.cluster import routes as cluster_routes
from backend.components.cluster.members import Membership
from backend.components.cluster.service import ClusterService
from backend.components.federation import websocket
from backend.core.rpc import ClientHub, Dispatcher
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId

log = logging.getLogger(__name__)

LINK_PATH = "/v1/cluster/link"
_NODE_FIELDS = ("node", "node_id")


class MemberRpc:
    """Serves members' links; closes each one whose member stops being trusted."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        dispatcher: Dispatcher,
        hub: ClientHub,
        cluster: ClusterService,
    ) -> None:
        self._node_id = node_id
        self._dispatcher = dispatcher
        self._hub = hub
        self._cluster = cluster
        self._peers: dict[RpcPeer, NodeId] = {}
        cluster.on_trust_changed(self._trust_changed)

    def add_routes(self, app: web.Application) -> None:
        """Route ``GET /v1/cluster/link`` (members only, like every ``/v1/cluster/*`` route);
        the links are closed first when the node API shuts down (they never end by themselves)."""
        app.router.add_get(LINK_PATH, self._serve)
        app.on_shutdown.append(self._close_all)

    async def _close_all(self, _: web.Application) -> None:
        for peer in list(self._peers):
            peer.abort()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        member = cluster_routes.member_or_forbidden(self._cluster, request)
        # The heartbeat is ``websocket.serve``'s (aiohttp's own would close after 1.5 periods).
        socket = web.WebSocketResponse(max_msg_size=websocket.MAX_FRAME_BYTES)
        await socket.prepare(request)
        peer, reader = websocket.peer_over(
            socket, name=f"member:{member.name}", on_request=self._handle
        )
        self._peers[peer] = member.node_id
        peer.context["node_id"] = member.node_id  # who asked, for what its calls leave behind
        self._hub.add(peer)
        log.info("member link from %s (%s) open", member.name, member.node_id)
        try:
            await websocket.serve(socket, peer, reader)
        finally:
            self._peers.pop(peer, None)
            self._hub.remove(peer)
            log.info("member link from %s (%s) closed", member.name, member.node_id)
        return socket

    async def _handle(self, method: str, params: Any, peer: RpcPeer) -> Any:
        if method not in methods.MEMBER_METHODS:
            raise errors.MethodNotFound(f"{method} is not offered to other members")
        if isinstance(params, dict):
            for field in _NODE_FIELDS:
                node = params.get(field)
                if node is not None and node != self._node_id:
                    raise errors.InvalidParams(
                        f"Invalid params for {method}: {field} {node!r} is not this node; "
                        "a member answers only for itself"
                    )
            params = {k: v for k, v in params.items() if k not in _NODE_FIELDS}
        return await self._dispatcher(method, params, peer)

    def _trust_changed(self, membership: Membership) -> None:
        trusted = {member.node_id for member in membership.trusted()}
        for peer, node_id in list(self._peers.items()):
            if node_id not in trusted:
                log.info("member %s is no longer trusted: its link is closed", node_id)
                peer.abort()
