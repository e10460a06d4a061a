"""Route one inference request: pick a node, fail over before the commit, stream after it.

The loop (docs/ARCHITECTURE.md, "Routing"): owners of the model only; order by pin, priority, this
node, then node id; place by the table's policy (docs/PLACEMENT.md) and reserve; dispatch; on
a transport error, a retryable status, a timeout or the target leaving the table, try the next
candidate; after a round, back off (1, 2, 4, 8 s ±25 %) and re-resolve; at most 5 dispatches
within 10 minutes. A round that leaves no node listing the model, and no member coming back
with it, ends the request with the door's own answer for an unknown model. The first body
byte commits: from then on the response streams to the client and is never retried.

Time and the backoff's jitter come from the ``Clock`` and ``RandomSource`` the worker's
composition passes in, so a test can drive the budget and the backoff exactly.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import msgspec
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from backend.protocol.proxy import DOOR_ENGINES
from backend.core.clock import Clock
from backend.protocol.proxy import Door, ProxyTargets, RouteTarget
from backend.protocol.types import JobKey, NodeId
from backend.workers.proxy.upstream.attempt import Commit, Failure, Timeouts, precommit
from backend.workers.proxy.channels.custody import Custody
from backend.workers.proxy.routing.departures import Departures, unless_gone
from backend.workers.proxy.scheduler.engine_access import LoadModel, LocalEngineAccess
from backend.workers.proxy.upstream.engine_client import EngineClient
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.upstream.forward import request_headers
from backend.workers.proxy.channels.jobs import Job, JobLog
from backend.workers.proxy.doors.missing import missing_model
from backend.workers.proxy.routing.naming import normalize
from backend.workers.proxy.relay.peer_tls import NoIdentity, PeerTls
from backend.workers.proxy.routing.placement.inputs import Candidate
from backend.workers.proxy.routing.placement.measure import OutputMeter
from backend.workers.proxy.routing.placement.placer import Placed, Placer
from backend.workers.proxy.relay.serving import REFUSED_HEADER
from backend.workers.proxy.routing.retry import BACKOFF_S, Budget, RandomSource
from backend.workers.proxy.routing.candidates import (
    Affinity,
    NodeLoad,
    Reservations,
    away_owner,
    candidates,
    owners,
    upstream_url,
)
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, EngineShape, LoadFailed, Ticket
from backend.workers.proxy.scheduler.sessions import pin_slot, session_of
from backend.workers.proxy.upstream.stream import openai_error_body, stream_commit
from backend.workers.proxy.doors.wire import dialect_for

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
    origin: NodeId | None = None
    job_key: JobKey | None = None
    attempt: int | None = None
    only: list[RouteTarget] | None = None
    session: str | None = None
    held: int | None = None  # its number with the broker while it waits (custody.py)


@dataclass(eq=False)
class _Dispatch:
    """One attempt: its admission by this node's scheduler (local only), whether the engine has
    the request, who watches."""

    job: Job
    target: RouteTarget
    attempt: int
    on_running: Callable[[_Dispatch], None]
    placed: Placed | None = None
    ticket: Ticket | None = None
    sent: bool = False
    running: bool = False  # reported Running (once per attempt)
    watchers: list[asyncio.Task[None] | asyncio.TimerHandle] = field(default_factory=list)

    def mark_sent(self) -> None:
        """The request's headers reached the engine (aiohttp trace callback)."""
        self.sent = True
        self.check_running()

    def check_running(self) -> None:
        """Running here once the scheduler admitted it and the engine has the request."""
        if self.sent and self.ticket is not None:
            self.on_running(self)


class Router:
    """Process-wide routing state shared by every door: reservations, busy holds, slots, jobs.

    Each attempt waiting for its commit watches its node's "gone" event (``Departures``); a new
    table sets the events of the nodes it no longer lists, and those attempts end themselves.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        jobs: JobLog,
        *,
        clock: Clock,
        rng: RandomSource,
        policy: RetryPolicy | None = None,
        on_started: Callable[[str, int], None] = lambda key, attempt: None,
        peer_started: Callable[[RouteTarget, str, int], asyncio.Task[None]] | None = None,
        peer_tls: PeerTls | None = None,
        load_model: LoadModel | None = None,
        on_scheduler_change: Callable[[], None] = lambda: None,
        affinity: bool = True,
        custody: Custody | None = None,
        retry_session: aiohttp.ClientSession | None = None,
        engines: EngineClient | None = None,
    ) -> None:
        self.session = session
        # Inference requests to engines in plain HTTP (this computer's): the lean client.
        self.engines = engines or EngineClient()
        # New connections only: the retry after a pooled connection turned out closed.
        self.retry_session = retry_session or session
        self.custody = custody or Custody(None)
        self.peer_tls = peer_tls or PeerTls()
        self.jobs = jobs
        self.policy = policy or RetryPolicy()
        self._clock = clock
        self._rng = rng
        self._targets = ProxyTargets()
        self._departures = Departures()
        self._reservations = Reservations()
        self._busy_until: dict[str, float] = {}
        self._schedulers: dict[str, EngineScheduler] = {}
        self._load_model = load_model or _no_broker
        self._on_scheduler_change = on_scheduler_change
        self._affinity = Affinity()
        self._placer = Placer(clock)
        self._use_affinity = affinity
        self._on_started = on_started
        self._peer_started = peer_started

    # The table.

    def targets(self) -> ProxyTargets:
        """The routing table as last sent by the broker."""
        return self._targets

    def update(self, targets: ProxyTargets) -> None:
        """Adopt a new table; signals the attempts whose node it no longer lists."""
        self._targets = targets
        loads = {node: NodeLoad(pending=count) for node, count in targets.loads.items()}
        self._reservations.apply_snapshot(targets.generation, loads)
        self._placer.table_changed(targets)
        present = {t.node_id for found in targets.engines.values() for t in found}
        for engine, found in targets.engines.items():
            for target in found:
                if target.kind == "local":
                    self.scheduler(engine).configure(shape_of(target))
        self._departures.table_changed(present)

    def scheduler(self, engine: str) -> EngineScheduler:
        """This node's scheduler for ``engine`` (made on first use)."""
        found = self._schedulers.get(engine)
        if found is None:
            access = LocalEngineAccess(
                engine, self.session, lambda: self._local(engine), self._load_model
            )
            found = EngineScheduler(
                engine,
                access,
                clock=self._clock,
                on_change=self._on_scheduler_change,
                affinity=self._use_affinity,
            )
            self._schedulers[engine] = found
        return found

    def schedulers(self) -> list[EngineScheduler]:
        """The schedulers of the engines this node runs, or that still have work."""
        local = {
            engine
            for engine, found in self._targets.engines.items()
            if any(t.kind == "local" for t in found)
        }
        return [
            scheduler
            for engine, scheduler in sorted(self._schedulers.items())
            if engine in local or scheduler.active
        ]

    async def close(self) -> None:
        """End every scheduler's own tasks; close the engines' kept-alive connections."""
        for scheduler in self._schedulers.values():
            await scheduler.aclose()
        await self.engines.close()

    def _local(self, engine: str) -> RouteTarget | None:
        return next((t for t in self._targets.engines.get(engine, []) if t.kind == "local"), None)

    # Admission.

    def busy_reply(self, door: Door, model: str) -> ErrorReply | None:
        """503 when every owner has just answered busy (no job is created)."""
        found = owners(self._targets, door, model)
        now = self._clock.monotonic()
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
        admission.session = session_of(request.headers, admission.body)
        # A request a killed worker held goes on as the same job, after its last event.
        held = self.custody.resumed(request.transport) if admission.origin is None else None
        if held is not None:
            admission.job_key, admission.attempt = JobKey(held.job), held.attempt + 1
        job = self.jobs.new(
            origin=admission.origin or NodeId(self._targets.node_id),
            engine=DOOR_ENGINES[admission.door],
            model=admission.model,
            path=admission.path.split("?", 1)[0],
            key=admission.job_key,
            resumed=(held.seq, held.created_at) if held is not None else None,
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
            if admission.held is not None:
                self.custody.release(admission.held)
            if not job.finished:
                job.failed("internal error: the request ended without an outcome")

    async def _dispatch_loop(
        self, request: web.Request, admission: Admission, job: Job
    ) -> web.StreamResponse:
        policy, clock = self.policy, self._clock
        budget = Budget(
            clock.monotonic(), 0, policy.max_dispatches, policy.deadline_s, policy.schedule
        )
        attempt = admission.attempt - 1 if admission.attempt else 0
        last: Failure | None = None
        while True:
            tried: set[str] = set()
            while budget.may_dispatch(clock.monotonic()):
                found = [c for c in self._candidates(admission) if c.node_id not in tried]
                if not found:
                    break
                target, generation, placed = self._reserve(admission, found)
                tried.add(target.node_id)
                attempt += 1
                budget = budget.dispatched()
                outcome = await self._dispatch(
                    request, admission, job, (target, generation, placed), attempt
                )
                if isinstance(outcome, web.StreamResponse):
                    return outcome
                last = outcome
            if admission.only is not None:
                break
            if self._vanished(admission):
                # No node has the model now and none is bringing it back (its engine was
                # stopped, its member removed): the door's own answer, not minutes of waiting.
                reply = missing_model(self._targets, admission.door, admission.model, job.path)
                job.failed(f"model '{admission.model}' is no longer on any node")
                return reply
            wait = budget.wait_before_next(clock.monotonic(), self._rng)
            if wait is None:
                break
            job.submitted(attempt + 1, None)
            await clock.sleep(wait)
        return self._give_up(job, last, budget)

    def _vanished(self, admission: Admission) -> bool:
        """Whether no node lists the model and no member that did is coming back."""
        targets, door, model = self._targets, admission.door, admission.model
        return not owners(targets, door, model) and away_owner(targets, door, model) is None

    def _candidates(self, admission: Admission) -> list[RouteTarget]:
        if admission.only is not None:
            return list(admission.only)
        return candidates(self._targets, admission.door, admission.model)

    def _reserve(
        self, admission: Admission, found: list[RouteTarget]
    ) -> tuple[RouteTarget, int, Placed | None]:
        """Place the request by the table's policy (docs/PLACEMENT.md); a pin goes first.

        The placement is returned only for a dispatch to learn from (``Placer.sampling``)."""
        engine = DOOR_ENGINES[admission.door]
        model = normalize(engine, admission.model)
        placer = self._placer
        placing: list[Candidate] | None = None
        index = 0
        if len(found) > 1 and found[0].node_id != self._targets.pins.get(engine):
            placing = self._inputs(admission, found, affinity=self._use_affinity)
            index = placer.choose(self._targets.placement, placing, model)
        chosen = found[index]
        placed = None
        if placer.sampling(chosen.node_id, model):
            # With nothing to choose, the node's inputs are gathered only to learn from it.
            if placing is None:
                placing, index = self._inputs(admission, [chosen], affinity=False), 0
            placed = placer.placed(placing[index], engine, admission.model)
        return chosen, self._reservations.take(chosen.node_id), placed

    def _inputs(
        self, admission: Admission, targets: list[RouteTarget], *, affinity: bool
    ) -> list[Candidate]:
        """What placement knows of each of ``targets`` for this request."""
        reservations = self._reservations
        return self._placer.candidates(
            DOOR_ENGINES[admission.door],
            admission.model,
            targets,
            loads=lambda node: (reservations.pending(node), reservations.held(node)),
            affinity=self._affinity.node_for(admission.session) if affinity else None,
        )

    def _give_up(self, job: Job, last: Failure | None, budget: Budget) -> web.StreamResponse:
        if last is None or (budget.may_dispatch(self._clock.monotonic()) and last.kind != "status"):
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

    async def _dispatch(
        self,
        request: web.Request,
        admission: Admission,
        job: Job,
        placement: tuple[RouteTarget, int, Placed | None],
        attempt: int,
    ) -> web.StreamResponse | Failure:
        target, generation, placed = placement
        job.submitted(attempt, NodeId(target.node_id))
        dispatch = _Dispatch(job, target, attempt, self._started, placed)
        try:
            outcome = await self._attempt(request, admission, dispatch)
        finally:
            self._reservations.release(target.node_id, generation)
        if isinstance(outcome, Failure):
            log.info("attempt %d at %s failed: %s", attempt, target.node_id, outcome.message)
        return outcome

    async def _attempt(
        self, request: web.Request, admission: Admission, dispatch: _Dispatch
    ) -> web.StreamResponse | Failure:
        node = dispatch.target.node_id
        self._watch_start(admission, dispatch)
        try:
            with self._departures.watch(node) as gone:
                work = self._precommit(request, admission, dispatch)
                outcome = await unless_gone(work, gone, node)
            if isinstance(outcome, Failure):
                if outcome.status in (429, 503):
                    self._busy_until[node] = self._clock.monotonic() + BUSY_HOLD_S
                return outcome
            self._busy_until.pop(node, None)
            self._affinity.served(admission.session, node)
            try:
                await self._let_go(admission)
            except BaseException:
                outcome.discard()
                raise
            return await self._stream(request, outcome, dispatch)
        finally:
            for watcher in dispatch.watchers:
                watcher.cancel()
            if dispatch.ticket is not None:
                self.scheduler(dispatch.job.engine).release(dispatch.ticket)

    async def _let_go(self, admission: Admission) -> None:
        """The answer is about to reach the client: a held request is released first, so it
        is never served twice (until now a worker crash gives it to the next worker, which
        sends it again; the engine dropped the first copy with its connection)."""
        if admission.held is not None:
            self.custody.release(admission.held)
            admission.held = None
            await self.custody.released()

    async def _stream(
        self, request: web.Request, commit: Commit, dispatch: _Dispatch
    ) -> web.StreamResponse:
        """Stream the committed response; learn the node's pace from it (docs/PLACEMENT.md)."""
        placed = dispatch.placed if 200 <= commit.upstream.status < 300 else None
        meter = OutputMeter(self._clock.monotonic) if placed is not None else None
        if placed is not None:
            self._placer.first_byte(placed)
        response = await stream_commit(
            request,
            commit,
            dispatch.job,
            write_deadline_s=self.policy.write_deadline_s,
            # Silence after the first byte is bounded like silence before it.
            idle_s=self._targets.first_content_timeout_s,
            on_output=lambda: self._output(dispatch),
            on_chunk=meter.feed if meter is not None else None,
        )
        if placed is not None and meter is not None and dispatch.job.outcome == "completed":
            self._placer.completed(placed, meter)
        return response

    def _watch_start(self, admission: Admission, dispatch: _Dispatch) -> None:
        """Report Running when the peer says the request holds a slot there (a local one is
        Running once its scheduler admits it and the engine has it)."""
        target = dispatch.target
        if target.kind == "peer" and self._peer_started is not None:
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
        if dispatch.running:
            return
        dispatch.running = True
        dispatch.job.started(NodeId(dispatch.target.node_id), dispatch.attempt)
        self._on_started(dispatch.job.key, dispatch.attempt)

    def _output(self, dispatch: _Dispatch) -> None:
        """A 2xx response starts streaming: it holds a slot, and the job is Running."""
        self._started(dispatch)

    async def _precommit(
        self, request: web.Request, admission: Admission, dispatch: _Dispatch
    ) -> Commit | Failure:
        target = dispatch.target
        body = admission.body
        if target.kind == "local":
            admitted = await self._admit_local(request, admission, dispatch)
            if isinstance(admitted, Failure):
                return admitted
            body = admitted
        # Only this node's own engine sees the client's credentials: a bare engine added by
        # address has no key of its own here, and peers authenticate by mutual TLS.
        headers = request_headers(request, credentials=target.kind == "local")
        if target.kind == "peer":
            headers[ORIGIN_HEADER] = dispatch.job.origin
            headers[JOB_HEADER] = dispatch.job.key
            headers[ATTEMPT_HEADER] = str(dispatch.attempt)
        try:
            tls = self.peer_tls.client_tls(target)
        except NoIdentity as exc:
            return Failure("transport", str(exc))
        timeouts = Timeouts(self._targets.header_timeout_s, self._targets.first_content_timeout_s)
        outcome = await precommit(
            self.session,
            request.method,
            upstream_url(target, admission.path, admission.door),
            headers,
            body,
            timeouts,
            inference=admission.inference,
            sent=dispatch.mark_sent,
            tls=tls,
            retry_session=self.retry_session,
            engines=self.engines,
        )
        if isinstance(outcome, Commit) and _refused_by_peer(target, outcome):
            # The peer no longer trusts this computer (it removed us after the handshake of a
            # kept-alive connection): that is not the client's answer, another node may serve.
            outcome.discard()
            return Failure("transport", f"node {target.node_id} refused this computer")
        return outcome

    async def _admit_local(
        self, request: web.Request, admission: Admission, dispatch: _Dispatch
    ) -> bytes | Failure:
        """Wait for this node's scheduler to admit the request; the body, pinned to its slot.

        A front-door request left waiting is held with the broker from then until its answer
        starts (``custody.py``), so a worker crash does not lose it."""
        engine = dispatch.job.engine
        target = dispatch.target
        scheduler = self.scheduler(engine)
        model = normalize(engine, admission.model)

        def hold() -> None:
            if admission.origin is None and admission.held is None:
                job = dispatch.job
                admission.held = self.custody.hold(request, admission.door, admission.body, job)

        # Admitted at once in the common case, without a wait (or a coroutine) for it.
        dispatch.ticket = scheduler.admit_now(model, session=admission.session)
        if dispatch.ticket is None:
            try:
                dispatch.ticket = await scheduler.admit(
                    model, session=admission.session, on_wait=hold
                )
            except LoadFailed as exc:
                return Failure(
                    "status",
                    f"{engine} could not load {admission.model}: {exc}",
                    status=500,
                    body=msgspec.json.encode({"error": f"could not load {admission.model}: {exc}"}),
                )
        dispatch.check_running()
        slot = dispatch.ticket.slot
        if slot is None or target.slot_api is None:
            return admission.body
        return pin_slot(admission.body, target.slot_api.field, slot)


def shape_of(target: RouteTarget) -> EngineShape:
    """What the scheduler needs from this node's routing-table entry for an engine."""
    return EngineShape(
        slots=max(target.slots, 1),
        model_slots=dict(target.model_slots),
        single_model=target.single_model,
        resident=tuple(target.resident),
        instance=target.instance,
        pinning=target.slot_api is not None,
        slots_known=target.slots_known,
        parking=target.slot_api is not None and target.slot_api.parks,
    )


async def _no_broker(engine: str, model: str) -> int:
    raise LoadFailed(f"{engine} cannot switch to {model} here")


def _refused_by_peer(target: RouteTarget, commit: Commit) -> bool:
    upstream = commit.upstream
    return target.kind == "peer" and upstream.status == 403 and REFUSED_HEADER in upstream.headers


def _reply_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The headers of a failed attempt worth keeping when it is answered as the final one."""
    return CIMultiDict(
        (name, value)
        for name, value in headers.items()
        if name.lower() in ("content-type", "retry-after")
    )
