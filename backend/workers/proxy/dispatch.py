"""Route one inference request: pick a node, fail over before the commit, stream after it.

The loop (pair-anchor §3.3-3.5): owners of the model only; order by pin, priority, this
node, then node id; reserve the least loaded; dispatch; on a transport error, a retryable
status, a timeout or the target leaving the table, try the next candidate; after a round,
back off (1, 2, 4, 8 s ±25 %) and re-resolve; at most 5 dispatches within 10 minutes. The
first body byte commits: from then on the response streams to the client and is never retried.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from backend.components.proxy.naming import normalize
from backend.components.proxy.retry import BACKOFF_S, Budget
from backend.components.proxy.routing import NodeLoad, Reservations
from backend.components.proxy.targets import (
    DOOR_ENGINES,
    Door,
    ProxyTargets,
    RouteTarget,
    owners,
    upstream_url,
)
from backend.components.proxy.wire import dialect_for, error_body
from backend.workers.proxy.attempt import (
    FAILURE_BODY_LIMIT,
    Commit,
    Failure,
    Timeouts,
    precommit,
)
from backend.workers.proxy.errors import ErrorReply
from backend.workers.proxy.forward import (
    PROXY_MS_HEADER,
    STARTED_KEY,
    cors_headers,
    elapsed_ms,
    format_ms,
    request_headers,
    response_headers,
)
from backend.workers.proxy.jobs import Job, JobLog
from backend.workers.proxy.markers import EndMarker
from backend.workers.proxy.slots import SlotTracker, Ticket

log = logging.getLogger(__name__)

BUSY_HOLD_S = 2.0
WRITE_DEADLINE_S = 30.0
PEER_POLL_DELAY_S = 0.1
ORIGIN_HEADER = "X-PAIR-Origin"
JOB_HEADER = "X-PAIR-Job"
ATTEMPT_HEADER = "X-PAIR-Attempt"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Dispatch budget and backoff (the environment can shorten them for tests)."""

    max_dispatches: int = 5
    deadline_s: float = 600.0
    schedule: tuple[float, ...] = BACKOFF_S
    # A client that has not taken a chunk for this long is cut (a half-open "zombie").
    write_deadline_s: float = WRITE_DEADLINE_S


@dataclass
class Admission:
    """What one request asks for and who asked."""

    door: Door
    model: str
    body: bytes
    path: str
    inference: bool = True
    origin: str | None = None
    job_key: str | None = None
    attempt: int | None = None
    only: list[RouteTarget] | None = None


@dataclass(eq=False)
class _Dispatch:
    """One attempt: its slot ticket here, whether the engine has the request, who watches."""

    job: Job
    target: RouteTarget
    attempt: int
    on_running: Callable[[_Dispatch], None]
    ticket: Ticket | None = None
    sent: bool = False
    gone: bool = False
    task: asyncio.Task[Any] | None = None
    watchers: list[asyncio.Task[None] | asyncio.TimerHandle] = field(default_factory=list)

    def mark_sent(self) -> None:
        """The request's headers reached the engine (aiohttp trace callback)."""
        self.sent = True
        self.check_running()

    def check_running(self) -> None:
        """Running here once the engine has the request and it holds a slot."""
        if self.sent and self.ticket is not None and self.ticket.running.is_set():
            self.on_running(self)


class Router:
    """Process-wide routing state shared by every door: reservations, busy holds, slots, jobs."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        jobs: JobLog,
        *,
        policy: RetryPolicy | None = None,
        on_started: Callable[[str, int], None] = lambda key, attempt: None,
        peer_started: Callable[[RouteTarget, str, int], asyncio.Task[None]] | None = None,
    ) -> None:
        self.session = session
        self.jobs = jobs
        self.policy = policy or RetryPolicy()
        self._targets = ProxyTargets()
        # Attempts waiting for their commit, by node: cancelled when the node leaves.
        self._attempts: dict[str, set[_Dispatch]] = {}
        self._reservations = Reservations()
        self._busy_until: dict[str, float] = {}
        self._slots: dict[str, SlotTracker] = {}
        self._rng = random.Random()
        self._on_started = on_started
        self._peer_started = peer_started

    # The table.

    def targets(self) -> ProxyTargets:
        """The routing table as last sent by the broker."""
        return self._targets

    def update(self, targets: ProxyTargets) -> None:
        """Adopt a new table; wakes every attempt watching for its target to leave."""
        self._targets = targets
        loads = {node: NodeLoad(pending=count) for node, count in targets.loads.items()}
        self._reservations.apply_snapshot(targets.generation, loads)
        present = {t.node_id for found in targets.engines.values() for t in found}
        for node in [node for node in self._attempts if node not in present]:
            for dispatch in self._attempts.pop(node):
                if dispatch.task is not None and not dispatch.gone:
                    dispatch.gone = True
                    dispatch.task.cancel()

    def slots(self, engine: str) -> SlotTracker:
        """This node's slot tracker for ``engine``."""
        return self._slots.setdefault(engine, SlotTracker())

    # Admission.

    def busy_reply(self, door: Door, model: str) -> ErrorReply | None:
        """503 when every owner has just answered busy (no job is created)."""
        found = owners(self._targets, door, model)
        now = time.monotonic()
        holds = [self._busy_until.get(t.node_id, 0.0) - now for t in found]
        if not found or min(holds) <= 0:
            return None
        retry_after = max(1, math.ceil(min(holds)))
        return ErrorReply(
            503,
            "every node that has the requested model is busy; try again shortly",
            "service_unavailable",
            headers={"Retry-After": str(retry_after)},
        )

    async def route(self, request: web.Request, admission: Admission) -> web.StreamResponse:
        """Serve one inference request end to end, with its job."""
        engine = DOOR_ENGINES[admission.door]
        targets = self._targets
        job = self.jobs.new(
            origin=admission.origin or targets.node_id,
            engine=engine,
            model=admission.model,
            path=admission.path.split("?", 1)[0],
            key=admission.job_key,
        )
        try:
            return await self._dispatch_loop(request, admission, job)
        except asyncio.CancelledError:
            job.cancelled("the client disconnected")
            raise
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            job.cancelled("the client disconnected")
            raise
        finally:
            if not job.finished:
                job.failed("internal error: the request ended without an outcome")

    async def _dispatch_loop(
        self, request: web.Request, admission: Admission, job: Job
    ) -> web.StreamResponse:
        policy = self.policy
        budget = Budget(
            time.monotonic(), 0, policy.max_dispatches, policy.deadline_s, policy.schedule
        )
        attempt = admission.attempt - 1 if admission.attempt else 0
        last: Failure | None = None
        while True:
            tried: set[str] = set()
            while budget.may_dispatch(time.monotonic()):
                candidates = [c for c in self._candidates(admission) if c.node_id not in tried]
                if not candidates:
                    break
                target, generation = self._reserve(admission, candidates)
                tried.add(target.node_id)
                attempt += 1
                budget = budget.dispatched()
                job.submitted(attempt, target.node_id)
                dispatch = _Dispatch(job, target, attempt, self._started)
                try:
                    outcome = await self._attempt(request, admission, dispatch)
                finally:
                    self._reservations.release(target.node_id, generation)
                if isinstance(outcome, web.StreamResponse):
                    return outcome
                last = outcome
                log.info("attempt %d at %s failed: %s", attempt, target.node_id, outcome.message)
            if admission.only is not None:
                break
            wait = budget.wait_before_next(time.monotonic(), self._rng)
            if wait is None:
                break
            job.submitted(attempt + 1, None)
            await asyncio.sleep(wait)
        return self._give_up(job, last, budget)

    def _candidates(self, admission: Admission) -> list[RouteTarget]:
        if admission.only is not None:
            return list(admission.only)
        targets = self._targets
        found = owners(targets, admission.door, admission.model)
        engine = DOOR_ENGINES[admission.door]
        pin = targets.pins.get(engine)
        rank = {node: index for index, node in enumerate(targets.priority)}

        def key(target: RouteTarget) -> tuple[int, int, int, str]:
            return (
                0 if target.node_id == pin else 1,
                rank.get(target.node_id, len(rank)),
                0 if target.kind == "local" else 1,
                target.node_id,
            )

        return sorted(found, key=key)

    def _reserve(
        self, admission: Admission, candidates: list[RouteTarget]
    ) -> tuple[RouteTarget, int]:
        engine = DOOR_ENGINES[admission.door]
        pinned = candidates[0].node_id == self._targets.pins.get(engine)
        by_id = {c.node_id: c for c in candidates}
        node, generation = self._reservations.pick([c.node_id for c in candidates], pinned=pinned)
        return by_id[node], generation

    def _give_up(self, job: Job, last: Failure | None, budget: Budget) -> web.StreamResponse:
        if last is None or (budget.may_dispatch(time.monotonic()) and last.kind != "status"):
            reply = ErrorReply(
                503,
                "no node that has the requested model could be reached in time",
                "service_unavailable",
                headers={"Retry-After": "5"},
            )
            job.failed(reply.message)
            return reply.response(job.path)
        job.failed(last.message)
        if last.kind == "status" and last.status is not None:
            body = last.body
            if dialect_for(job.path) == "openai":
                body = openai_error_body(body, last.status)
            response = web.Response(status=last.status, body=body)
            if last.headers is not None:
                response.headers.extend(_reply_headers(last.headers))
            return response
        status = 504 if last.kind == "no-content" else 502
        return ErrorReply(status, last.message, "bad_gateway").response(job.path)

    # One attempt.

    async def _attempt(
        self, request: web.Request, admission: Admission, dispatch: _Dispatch
    ) -> web.StreamResponse | Failure:
        target = dispatch.target
        self._watch_start(admission, dispatch)
        try:
            outcome = await self._until_commit(request, admission, dispatch)
            if isinstance(outcome, Failure):
                if outcome.status in (429, 503):
                    self._busy_until[target.node_id] = time.monotonic() + BUSY_HOLD_S
                return outcome
            self._busy_until.pop(target.node_id, None)
            return await self._stream(request, dispatch, outcome)
        finally:
            for watcher in dispatch.watchers:
                watcher.cancel()
            if dispatch.ticket is not None:
                self.slots(dispatch.job.engine).leave(dispatch.ticket)

    def _watch_start(self, admission: Admission, dispatch: _Dispatch) -> None:
        """Report Running when the request holds a slot here, or the peer says it does there."""
        target, job = dispatch.target, dispatch.job
        if target.kind == "local":
            engine = job.engine
            model = normalize(engine, admission.model)
            capacity = target.model_slots.get(model, target.slots)
            dispatch.ticket = self.slots(engine).enter(model, capacity, dispatch.check_running)
        elif target.kind == "peer" and self._peer_started is not None:
            # Most requests commit sooner; only a slow start is worth asking the peer about.
            handle = asyncio.get_running_loop().call_later(
                PEER_POLL_DELAY_S, self._poll_peer, dispatch
            )
            dispatch.watchers.append(handle)

    def _poll_peer(self, dispatch: _Dispatch) -> None:
        assert self._peer_started is not None
        task = self._peer_started(dispatch.target, dispatch.job.key, dispatch.attempt)
        task.add_done_callback(
            lambda done: (
                self._started(dispatch)
                if not done.cancelled() and done.exception() is None
                else None
            )
        )
        dispatch.watchers.append(task)

    def _started(self, dispatch: _Dispatch) -> None:
        dispatch.job.started(dispatch.target.node_id, dispatch.attempt)
        self._on_started(dispatch.job.key, dispatch.attempt)

    async def _until_commit(
        self, request: web.Request, admission: Admission, dispatch: _Dispatch
    ) -> Commit | Failure:
        target = dispatch.target
        headers = request_headers(request)
        if target.kind == "peer":
            headers[ORIGIN_HEADER] = dispatch.job.origin
            headers[JOB_HEADER] = dispatch.job.key
            headers[ATTEMPT_HEADER] = str(dispatch.attempt)
        timeouts = Timeouts(self._targets.header_timeout_s, self._targets.first_content_timeout_s)
        task = asyncio.current_task()
        assert task is not None
        dispatch.task = task
        watching = self._attempts.setdefault(target.node_id, set())
        watching.add(dispatch)
        try:
            return await precommit(
                self.session,
                request.method,
                upstream_url(target, admission.path),
                headers,
                admission.body,
                timeouts,
                inference=admission.inference,
                sent=dispatch.mark_sent,
            )
        except asyncio.CancelledError:
            # Cancelled by update() because the node left: that is this attempt's failure,
            # unless the client went away too (then the cancellation goes on).
            if dispatch.gone and task.uncancel() == 0:
                return Failure("target-gone", f"node {target.node_id} left the table")
            raise
        finally:
            watching.discard(dispatch)
            if not watching and self._attempts.get(target.node_id) is watching:
                del self._attempts[target.node_id]

    async def _stream(
        self, request: web.Request, dispatch: _Dispatch, commit: Commit
    ) -> web.StreamResponse:
        upstream, job = commit.upstream, dispatch.job
        try:
            success = 200 <= upstream.status < 300
            if not success and dialect_for(job.path) == "openai":
                reshaped = await _openai_error(upstream, commit.first)
                if reshaped is not None:
                    job.failed(f"the engine answered {upstream.status}")
                    return reshaped
            if success:
                if dispatch.ticket is not None:
                    self.slots(job.engine).output(dispatch.ticket)
                self._started(dispatch)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(response_headers(upstream))
            response.headers.extend(cors_headers(request))
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            response.headers[PROXY_MS_HEADER] = format_ms(elapsed_ms(request[STARTED_KEY]))
            marker = EndMarker(upstream.headers.get("Content-Type", ""))
            await response.prepare(request)
            chunk = commit.first
            try:
                while chunk:
                    marker.feed(chunk)
                    await _write(response, chunk, self.policy.write_deadline_s)
                    chunk = await upstream.content.readany()
            except TimeoutError:
                job.cancelled("the client stopped reading")
                _abort(request)
                return response
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
                if isinstance(exc, ConnectionResetError) and _client_gone(request):
                    raise
                job.failed(f"the engine's response broke off: {exc or type(exc).__name__}")
                _abort(request)
                return response
            await response.write_eof()
            if not success:
                job.failed(f"the engine answered {upstream.status} {upstream.reason or ''}".strip())
            elif marker.complete():
                job.completed()
            else:
                job.failed("the stream ended without the engine's final marker")
            return response
        finally:
            upstream.close()


async def _openai_error(upstream: aiohttp.ClientResponse, first: bytes) -> web.Response | None:
    """A small JSON error answer, read whole and put in OpenAI's shape; None to stream it."""
    if (
        "json" not in upstream.headers.get("Content-Type", "")
        or (upstream.content_length or FAILURE_BODY_LIMIT + 1) > FAILURE_BODY_LIMIT
    ):
        return None
    body = first + await upstream.content.read()
    return web.Response(
        status=upstream.status,
        body=openai_error_body(body, upstream.status),
        content_type="application/json",
    )


def openai_error_body(body: bytes, status: int) -> bytes:
    """An engine's flat ``{"error": "text"}`` (LM Studio does this) as an OpenAI error object.

    Anything else (already an object, not JSON) is returned unchanged.
    """
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(decoded, dict) or not isinstance(decoded.get("error"), str):
        return body
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    if status >= 500:
        kind = "server_error"
    return msgspec.json.encode(error_body("openai", decoded["error"], kind=kind, code=None))


async def _write(response: web.StreamResponse, chunk: bytes, deadline: float) -> None:
    async with asyncio.timeout(deadline):
        await response.write(chunk)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _abort(request: web.Request) -> None:
    """Cut the client's connection so it sees an incomplete response, not a clean end."""
    transport = request.transport
    if transport is not None:
        transport.abort()


def _reply_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The headers of a failed attempt worth keeping when it is answered as the final one."""
    return CIMultiDict(
        (name, value)
        for name, value in headers.items()
        if name.lower() in ("content-type", "retry-after")
    )
