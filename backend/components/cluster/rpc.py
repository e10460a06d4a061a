"""JSON-RPC methods of the cluster (``cluster:*``): status, invites, the join window, membership
(remove, leave, rename) and the numbered stream."""

from __future__ import annotations

from backend.components.cluster.service import ClusterService
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.cluster import (
    ClusterEvent,
    ClusterLeft,
    ClusterRename,
    ClusterSnapshot,
    ClusterStatus,
    Invite,
    InviteAnswer,
    InviteCreated,
    InviteParams,
    InviteRef,
    JoinWindowParams,
    JoinWindowState,
    MemberRef,
    MemberRemoved,
    NodeProbe,
)
from backend.protocol.types.results import Unsubscribed


def register(
    dispatcher: Dispatcher, service: ClusterService, events: NumberedStream[ClusterEvent]
) -> None:
    """Route ``cluster:*``."""

    async def status(_: NoParams, __: RpcPeer) -> ClusterStatus:
        return service.status()

    async def subscribe(_: NoParams, peer: RpcPeer) -> ClusterSnapshot:
        return ClusterSnapshot(seq=events.subscribe(peer), status=service.status())

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        events.unsubscribe(peer)
        return Unsubscribed()

    async def probe(params: InviteParams, _: RpcPeer) -> NodeProbe:
        return await service.probe(params.address.strip(), params.port)

    async def invite(params: InviteParams, _: RpcPeer) -> InviteCreated:
        return await service.invite(params.address.strip(), params.port)

    async def accept(params: InviteAnswer, _: RpcPeer) -> Invite:
        return await service.accept(params.id, params.pin)

    async def decline(params: InviteRef, _: RpcPeer) -> Invite:
        return await service.decline(params.id)

    async def cancel(params: InviteRef, _: RpcPeer) -> Invite:
        return await service.cancel(params.id)

    async def open_join_window(params: JoinWindowParams, _: RpcPeer) -> JoinWindowState:
        return service.open_join_window(params.minutes)

    async def close_join_window(_: NoParams, __: RpcPeer) -> JoinWindowState:
        return service.close_join_window()

    async def remove(params: MemberRef, _: RpcPeer) -> MemberRemoved:
        return await service.roster.remove(params.node_id)

    async def leave(_: NoParams, __: RpcPeer) -> ClusterLeft:
        return await service.roster.leave()

    async def rename(params: ClusterRename, _: RpcPeer) -> ClusterStatus:
        await service.roster.rename(params.name)
        return service.status()

    dispatcher.add(methods.CLUSTER_STATUS, status)
    dispatcher.add(methods.CLUSTER_SUBSCRIBE, subscribe)
    dispatcher.add(methods.CLUSTER_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.CLUSTER_PROBE, probe)
    dispatcher.add(methods.CLUSTER_INVITE, invite)
    dispatcher.add(methods.CLUSTER_ACCEPT, accept)
    dispatcher.add(methods.CLUSTER_DECLINE, decline)
    dispatcher.add(methods.CLUSTER_CANCEL, cancel)
    dispatcher.add(methods.CLUSTER_OPEN_JOIN_WINDOW, open_join_window)
    dispatcher.add(methods.CLUSTER_CLOSE_JOIN_WINDOW, close_join_window)
    dispatcher.add(methods.CLUSTER_REMOVE, remove)
    dispatcher.add(methods.CLUSTER_LEAVE, leave)
    dispatcher.add(methods.CLUSTER_RENAME, rename)
