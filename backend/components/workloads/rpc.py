"""JSON-RPC methods of workloads: the jobs list (snapshot + numbered events), newest first, and
clearing the history of finished jobs."""

from __future__ import annotations

from backend.components.workloads.component import WorkloadsComponent
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import errors, methods
from backend.protocol.contract import Method, NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.jobs import WorkloadsEvent, WorkloadsQuery, WorkloadsSnapshot
from backend.protocol.types.results import Cleared, Unsubscribed

MAX_LIMIT = 1000


def register(
    dispatcher: Dispatcher, workloads: WorkloadsComponent, events: NumberedStream[WorkloadsEvent]
) -> None:
    """Route ``jobs:get-initial``, ``jobs:subscribe``, ``jobs:unsubscribe`` and
    ``jobs:clear``."""

    async def get_initial(params: WorkloadsQuery, _: RpcPeer) -> WorkloadsSnapshot:
        limit = _limit(methods.WORKLOADS_GET_INITIAL, params)
        jobs = workloads.workloads(limit, origin=params.origin)
        return WorkloadsSnapshot(seq=events.seq, workloads=jobs)

    async def subscribe(params: WorkloadsQuery, peer: RpcPeer) -> WorkloadsSnapshot:
        limit = _limit(methods.WORKLOADS_SUBSCRIBE, params)
        seq = events.subscribe(peer)
        jobs = workloads.workloads(limit, origin=params.origin)
        return WorkloadsSnapshot(seq=seq, workloads=jobs)

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        events.unsubscribe(peer)
        return Unsubscribed()

    async def clear(_: NoParams, __: RpcPeer) -> Cleared:
        return Cleared(cleared=await workloads.clear_finished())

    dispatcher.add(methods.WORKLOADS_GET_INITIAL, get_initial)
    dispatcher.add(methods.WORKLOADS_SUBSCRIBE, subscribe)
    dispatcher.add(methods.WORKLOADS_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.WORKLOADS_CLEAR, clear)


def _limit(method: Method[WorkloadsQuery, WorkloadsSnapshot], params: WorkloadsQuery) -> int:
    if not 1 <= params.limit <= MAX_LIMIT:
        raise errors.InvalidParams(
            f"Invalid params for {method.name}: limit must be 1-{MAX_LIMIT}, got {params.limit}"
        )
    return params.limit
