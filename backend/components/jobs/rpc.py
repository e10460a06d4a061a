"""JSON-RPC methods of the jobs component: the jobs list (snapshot + numbered events), newest
first, and clearing the history of finished jobs."""

from __future__ import annotations

from backend.components.jobs.component import JobsComponent
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import errors, methods
from backend.protocol.contract import Method, NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.jobs import JobDetails, JobRef, JobsEvent, JobsQuery, JobsSnapshot
from backend.protocol.types.results import Cleared, Unsubscribed

MAX_LIMIT = 1000


def register(
    dispatcher: Dispatcher, jobs: JobsComponent, events: NumberedStream[JobsEvent]
) -> None:
    """Route ``jobs:get-initial``, ``jobs:subscribe``, ``jobs:unsubscribe``, ``jobs:clear``
    and ``jobs:get``."""

    async def get_initial(params: JobsQuery, _: RpcPeer) -> JobsSnapshot:
        limit = _limit(methods.JOBS_GET_INITIAL, params)
        records = jobs.records(limit, origin=params.origin)
        return JobsSnapshot(seq=events.seq, jobs=records)

    async def subscribe(params: JobsQuery, peer: RpcPeer) -> JobsSnapshot:
        limit = _limit(methods.JOBS_SUBSCRIBE, params)
        seq = events.subscribe(peer)
        records = jobs.records(limit, origin=params.origin)
        return JobsSnapshot(seq=seq, jobs=records)

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        events.unsubscribe(peer)
        return Unsubscribed()

    async def clear(_: NoParams, __: RpcPeer) -> Cleared:
        return Cleared(cleared=await jobs.clear_finished())

    async def details(params: JobRef, _: RpcPeer) -> JobDetails:
        return jobs.details(params.key)

    dispatcher.add(methods.JOBS_GET_INITIAL, get_initial)
    dispatcher.add(methods.JOBS_SUBSCRIBE, subscribe)
    dispatcher.add(methods.JOBS_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.JOBS_CLEAR, clear)
    dispatcher.add(methods.JOBS_GET, details)


def _limit(method: Method[JobsQuery, JobsSnapshot], params: JobsQuery) -> int:
    if not 1 <= params.limit <= MAX_LIMIT:
        raise errors.InvalidParams(
            f"Invalid params for {method.name}: limit must be 1-{MAX_LIMIT}, got {params.limit}"
        )
    return params.limit
