"""What one request asks for (``Admission``) and one attempt to serve it (``Dispatch``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
from aiohttp import web

from backend.protocol.proxy import Door, RouteTarget
from backend.protocol.types.base import JobKey, NodeId
from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.wire import Dialect
from backend.workers.proxy.routing.links import PeerStartedProbe
from backend.workers.proxy.routing.placement.placer import Placed
from backend.workers.proxy.scheduler.engine_scheduler import Ticket
from backend.workers.proxy.translate.base import LoadRequest, Malformed, Translation, Unhonoured
from backend.workers.proxy.translate.plan import translation_for

# What a request relayed to a peer says of itself: the node it came from, its job, which try.
ORIGIN_HEADER = "X-PAIR-Origin"
JOB_HEADER = "X-PAIR-Job"
ATTEMPT_HEADER = "X-PAIR-Attempt"
# Most requests commit sooner than this; only a slow start is worth asking the peer about.
PEER_POLL_DELAY_S = 0.1


class Admission(msgspec.Struct):
    """What one request asks for and who asked."""

    door: Door
    model: str
    body: bytes
    path: str
    inference: bool = True
    origin: NodeId | None = None
    job_key: JobKey | None = None
    attempt: int | None = None
    only: list[RouteTarget] | None = None
    session: str | None = None
    held: int | None = None  # its number with the broker while it waits (custody.py)
    dialect: Dialect = "openai"  # the client's API (its path's)
    moved: bool = False  # it left this node's queue for another owner once (rebalance.py)
    steer: str | None = None  # where its next attempt goes (a move's node), once

    def repin(self, model: str, only: list[RouteTarget]) -> None:
        """Serve the bare ``model`` of a pinned name, with ``only`` these targets; the body
        names it so too (rare: decoded and encoded once)."""
        body = msgspec.json.decode(self.body)
        body["model"] = model
        self.body, self.model, self.only = msgspec.json.encode(body), model, only


class Dispatch(msgspec.Struct, eq=False):
    """One attempt: its admission by this node's scheduler (local only), whether the engine has
    the request, who watches."""

    job: Job
    target: RouteTarget
    attempt: int
    on_running: Callable[[Dispatch], None]
    placed: Placed | None = None
    ticket: Ticket | None = None
    sent: bool = False
    running: bool = False  # reported Running (once per attempt)
    watchers: list[asyncio.Task[None] | asyncio.TimerHandle] = msgspec.field(default_factory=list)
    translation: Translation | None = None  # where the engine does not speak the client's API

    def body(self, admission: Admission) -> bytes:
        """The body the engine gets (translated or the client's own)."""
        translation = self.translation
        return admission.body if translation is None else translation.request.body

    def path(self, admission: Admission) -> str:
        """The path (and query) the engine gets."""
        translation = self.translation
        return admission.path if translation is None else translation.request.path

    def mark_sent(self) -> None:
        """The request's headers reached the engine (aiohttp trace callback)."""
        self.sent = True
        self.check_running()

    def check_running(self) -> None:
        """Running here once the scheduler admitted it and the engine has the request."""
        if self.sent and self.ticket is not None:
            self.on_running(self)


def watch_peer_start(dispatch: Dispatch, probe: PeerStartedProbe) -> None:
    """Report the attempt Running once its peer says it holds a slot there (a local one is
    Running once its scheduler admits it and the engine has it)."""
    handle = asyncio.get_running_loop().call_later(PEER_POLL_DELAY_S, _poll_peer, dispatch, probe)
    dispatch.watchers.append(handle)


def _poll_peer(dispatch: Dispatch, probe: PeerStartedProbe) -> None:
    task = probe(dispatch.target, dispatch.job.key, dispatch.attempt)
    task.add_done_callback(
        lambda done: (
            dispatch.on_running(dispatch)
            if not done.cancelled() and done.exception() is None
            else None
        )
    )
    dispatch.watchers.append(task)


def translate(admission: Admission, dispatch: Dispatch) -> web.Response | None:
    """Translate the request for the attempt's engine (this node's, or one added by address)
    where it does not speak the client's API; the client's 400 naming the field when it
    cannot be. A peer's request goes as the client sent it: the peer translates for its own."""
    try:
        dispatch.translation = translation_for(
            dispatch.target.engine, admission.path, admission.body
        )
    except (Unhonoured, Malformed) as exc:
        return ErrorReply(400, str(exc), "invalid_request_error").response(admission.path)
    except LoadRequest as load:
        dispatch.job.completed()
        return web.Response(body=load.body, content_type="application/json")
    return None
