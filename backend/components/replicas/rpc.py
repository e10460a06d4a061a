"""JSON-RPC methods of the replicas component: ``replicas:status``."""

from __future__ import annotations

from backend.components.replicas.component import ReplicasComponent
from backend.core.rpc import Dispatcher
from backend.protocol.contract import Method, NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.replicas import ReplicasStatus


def register(
    dispatcher: Dispatcher,
    replicas: ReplicasComponent,
    status_method: Method[NoParams, ReplicasStatus],
) -> None:
    """Route ``status_method`` (``methods.REPLICAS_STATUS``) to the component's ``status()``."""

    async def status(_: NoParams, __: RpcPeer) -> ReplicasStatus:
        return replicas.status()

    dispatcher.add(status_method, status)
