"""Route one inference request: pick a node, fail over before the commit, stream after it.

The loop (docs/ARCHITECTURE.md, "Routing"): owners of the model only; order by pin, priority, this
node, then node id; place by the table's policy (docs/PLACEMENT.md) and reserve; dispatch; on
a transport error, a retryable status, a timeout or the target leaving the table, try the next
candidate; after a round, back off (1, 2, 4, 8 s ±25 %) and re-resolve; at most 5 dispatches
within 10 minutes. A round that leaves no node listing the model, and no member coming back
with it, ends the request with the door's own answer for an unknown model; one whose only
owner is away (restarting, or its member link down) waits for it ``failover.AWAY_WAIT_S`` at
most, then gets the door's 503 naming it. The first body byte commits: from then on the
response streams to the client and is never retried; a member's stream is cut when the member
leaves the table (``liveness.py``).

Every choice of that loop is a pure function in ``failover.py``; the router does the I/O and applies
them. Time and the backoff's jitter come from the ``Clock`` and ``RandomSource`` the worker's
composition passes in, so a test can drive the budget and the backoff exactly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

import aiohttp
from aiohttp import web

from backend.core.clock import Clock
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.workers import cpu_policy
from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.clients import job_client
from backend.workers.proxy.doors.errors import ErrorReply
from backend.workers.proxy.doors.refused import RefusedJobs
from backend.workers.proxy.routing import failover
from backend.workers.proxy.routing.admission import (
    Admission,
    Dispatch,
    translate,
    watch_peer_start,
)
from backend.workers.proxy.routing.candidates import away_owner, candidates, owners, vanished
from backend.workers.proxy.routing.choice import NodeChoice
from backend.workers.proxy.routing.demand import Demand
from backend.workers.proxy.routing.departures import Departures, unless_gone
from backend.workers.proxy.routing.failover import Failover, RandomSource, RetryPolicy
from backend.workers.proxy.routing.final import final_reply
from backend.workers.proxy.routing.links import Links
from backend.workers.proxy.routing.liveness import PeerStreamWatch, relay_idle
from backend.workers.proxy.routing.local import LocalSchedulers
from backend.workers.proxy.routing.local_admit import admit_local
from backend.workers.proxy.routing.naming import normalize
from backend.workers.proxy.routing.placement.measure import OutputMeter
from backend.workers.proxy.routing.rebalance import Moved, Waiting
from backend.workers.proxy.routing.replies import busy_reply
from backend.workers.proxy.routing.send import send
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler
from backend.workers.proxy.scheduler.sessions import session_of
from backend.workers.proxy.upstream.attempt import Commit, Failure, Timeouts
from backend.workers.proxy.upstream.stream import stream_commit

log = logging.getLogger(__name__)


class Router:
    """Process-wide routing state shared by every door: reservations, busy holds, slots, jobs.

    Each attempt waiting for its commit watches its node's "gone" event (``Departures``); a new
    table sets the events of the nodes it no longer lists, and those attempts end themselves.
    Owns the local engines' schedulers; ``close`` ends them and the engines' connections.
    ``table`` is the routing table as last sent by the broker: replaced by ``update``, never
    changed, so a reader holds one consistent table for as long as it keeps it. ``demand``
    meters what the doors ask for and what this node's engines run (``demand.py``); ``cpu``
    counts the requests in flight and switches the process's CPU policy (``cpu_policy.py``).
    """

    def __init__(
        self,
        links: Links,
        *,
        clock: Clock,
        rng: RandomSource,
        policy: RetryPolicy,
        affinity: bool = True,
        cpu: cpu_policy.Governor | None = None,
    ) -> None:
        self.links = links
        # Only the worker's composition root switches the process's policy; by default count.
        self.cpu = cpu or cpu_policy.Governor("normal", monotonic=clock.monotonic)
        self.session = links.session
        self.jobs = links.jobs
        self.refused = RefusedJobs(links.jobs, clock.monotonic)
        self.peer_tls = links.peer_tls
        self.policy = policy
        self._clock = clock
        self._rng = rng
        self.table = ProxyTargets()
        self._departures = Departures()
        # Replaced, never changed: each attempt's outcome makes the next (``failover.busy_*``).
        self._busy_until: Mapping[str, float] = {}
        self._local = LocalSchedulers(
            links.session,
            links.load_model,
            clock=clock,
            on_change=links.on_scheduler_change,
            affinity=affinity,
        )
        self.demand = Demand()
        self._choice = NodeChoice(clock, affinity=affinity, demand=self.demand)
        self.waiting = Waiting(
            table=self._table_now,
            owners=self._candidates,
            inputs=self._choice.inputs,
            answer_tokens=self._choice.answer_tokens,
            scheduler=self.scheduler,
        )
        self._choice.on_steered = self.waiting.landed

    # The table.

    def update(self, targets: ProxyTargets) -> None:
        """Adopt a new table; signals the attempts whose node it no longer lists."""
        self.table = targets
        self._choice.table_changed(targets)
        self._local.table_changed(targets)
        present = {t.node_id for found in targets.engines.values() for t in found}
        self._departures.table_changed(present)
        self.waiting.soon()

    def scheduler(self, engine: str) -> EngineScheduler:
        """This node's scheduler for ``engine`` (made on first use)."""
        return self._local.scheduler(engine)

    def schedulers(self) -> list[EngineScheduler]:
        """The schedulers of the engines this node runs, or that still have work."""
        return self._local.active()

    async def close(self) -> None:
        """End every scheduler's own tasks; close the engines' kept-alive connections."""
        self.waiting.close()
        await self._local.close()
        await self.links.engines.close()

    # Admission.

    def busy_reply(self, owners: Sequence[RouteTarget]) -> ErrorReply | None:
        """503 when every one of the model's ``owners`` has just answered busy (no job is
        created)."""
        nodes = [target.node_id for target in owners]
        retry_after = failover.busy_retry_after(self._busy_until, nodes, self._clock.monotonic())
        return busy_reply(retry_after) if retry_after is not None else None

    async def route(self, request: web.Request, admission: Admission) -> web.StreamResponse:
        """Serve one inference request end to end, with its job."""
        admission.session = session_of(request.headers, admission.body)
        custody = self.links.custody
        # A request a killed worker held goes on as the same job, after its last event.
        held = custody.resumed(request.transport) if admission.origin is None else None
        if held is not None:
            admission.job_key, admission.attempt = JobKey(held.job), held.attempt + 1
        found = self._candidates(admission)
        job = self.jobs.new(
            origin=admission.origin or NodeId(self.table.node_id),
            engine=EngineName(found[0].engine if found else ""),
            model=admission.model,
            path=admission.path.split("?", 1)[0],
            key=admission.job_key,
            resumed=(held.seq, held.created_at) if held is not None else None,
            client=job_client(request, self.table),
        )
        # A member's request counts where its client asked; here only as local use.
        asked = admission.origin is None
        if asked:
            self.demand.admitted(admission.model, self.table, found)
        self.cpu.started()
        try:
            return await self._dispatch_loop(request, admission, job)
        except (asyncio.CancelledError, ConnectionResetError, aiohttp.ClientConnectionResetError):
            job.cancelled("the client disconnected")
            raise
        finally:
            self.cpu.ended()
            if admission.held is not None:
                custody.release(admission.held)
            if not job.finished:
                job.failed("internal error: the request ended without an outcome")
            if asked and job.committed_at is None:
                self.demand.committed(admission.model)

    async def _dispatch_loop(
        self, request: web.Request, admission: Admission, job: Job
    ) -> web.StreamResponse:
        clock = self._clock
        state = failover.started(self.policy, clock.monotonic(), admission.attempt)
        response: web.StreamResponse | None = None
        while response is None:
            found = failover.untried(state, self._candidates(admission), clock.monotonic())
            if found:
                state, response = await self._dispatch(request, admission, job, state, found)
                continue
            state, end = self._round_ended(state, admission)
            if not isinstance(end, failover.Backoff):
                now = clock.monotonic()
                return final_reply(self.table, job, admission.model, state, end, now)
            job.submitted(state.attempt + 1, None)
            await clock.sleep(end.seconds)
            state = failover.next_round(state)
        return response

    def _round_ended(
        self, state: Failover, admission: Admission
    ) -> tuple[Failover, failover.RoundEnd]:
        pinned = admission.only is not None
        table, model, now = self.table, admission.model, self._clock.monotonic()
        away = not pinned and not owners(table, model) and away_owner(table, model) is not None
        state = failover.awaiting(state, away, now)
        gone = not pinned and vanished(table, model)
        return state, failover.round_ended(state, now, self._rng, pinned=pinned, vanished=gone)

    def _candidates(self, admission: Admission) -> list[RouteTarget]:
        if admission.only is not None:
            return admission.only
        return candidates(self.table, admission.model, admission.dialect)

    # One attempt.

    async def _dispatch(
        self,
        request: web.Request,
        admission: Admission,
        job: Job,
        state: Failover,
        found: list[RouteTarget],
    ) -> tuple[Failover, web.StreamResponse | None]:
        """Place and send the next attempt; the failover after it, and the response if served."""
        target, generation, placed = self._choice.reserve(admission, found)
        state = failover.dispatched(state, target.node_id)
        attempt = state.attempt
        job.engine = EngineName(target.engine)
        job.submitted(attempt, NodeId(target.node_id))
        dispatch = Dispatch(job, target, attempt, self._started, placed)
        try:
            outcome = await self._attempt(request, admission, dispatch)
        finally:
            self._choice.release(target.node_id, generation)
        if isinstance(outcome, web.StreamResponse):
            return state, outcome
        if isinstance(outcome, Moved):
            log.info("attempt %d moves from %s to %s", attempt, target.node_id, outcome.node)
            admission.moved, admission.steer = True, outcome.node
            return failover.moved(state, target.node_id), None
        log.info("attempt %d at %s failed: %s", attempt, target.node_id, outcome.message)
        return failover.failed(state, outcome), None

    async def _attempt(
        self, request: web.Request, admission: Admission, dispatch: Dispatch
    ) -> web.StreamResponse | Failure | Moved:
        node = dispatch.target.node_id
        peer_started = self.links.peer_started
        if dispatch.target.kind == "peer" and peer_started is not None:
            watch_peer_start(dispatch, peer_started)
        else:
            refused = translate(admission, dispatch)
            if refused is not None:
                if not dispatch.job.finished:
                    dispatch.job.failed(f"the request cannot be put to {dispatch.target.engine}")
                return refused
        try:
            with self._departures.watch(node) as gone:
                work = self._precommit(request, admission, dispatch)
                outcome = await unless_gone(work, gone, node)
            if isinstance(outcome, Moved):
                return outcome
            if isinstance(outcome, Failure):
                self._failed_at(node, outcome)
                return outcome
            self._busy_until = failover.busy_freed(self._busy_until, node)
            self._committed(admission, dispatch)
            self._choice.served(admission.session, node)
            await self._let_go(admission, outcome)
            return await self._stream(request, outcome, dispatch)
        finally:
            for watcher in dispatch.watchers:
                watcher.cancel()
            if dispatch.ticket is not None:
                # A slot is idle again only once its answer was read to the end.
                finished = dispatch.job.outcome == "completed"
                self.scheduler(dispatch.target.engine).release(dispatch.ticket, finished=finished)
            if dispatch.target.kind == "local":
                if dispatch.job.committed_at is not None:
                    engine = dispatch.target.engine
                    self.demand.local_ended(engine, normalize(engine, admission.model))
            else:
                self.waiting.soon()  # a member's capacity freed: what waits here may move

    def _committed(self, admission: Admission, dispatch: Dispatch) -> None:
        """The attempt committed: its request waits no more, and a local engine runs it."""
        at = dispatch.job.committed_at = self._clock.wall()
        if admission.origin is None:
            self.demand.committed(admission.model)
        engine = dispatch.target.engine
        if dispatch.target.kind == "local":
            self.demand.local_started(engine, normalize(engine, admission.model), at)

    def _failed_at(self, node: str, failure: Failure) -> None:
        """A node that answered busy is held busy a while (``busy_reply``)."""
        if failover.holds_busy(failure):
            self._busy_until = failover.busy_held(self._busy_until, node, self._clock.monotonic())

    async def _let_go(self, admission: Admission, commit: Commit) -> None:
        """The answer is about to reach the client: a held request is released first, so it
        is never served twice (until now a worker crash gives it to the next worker, which
        sends it again; the engine dropped the first copy with its connection)."""
        if admission.held is None:
            return
        custody = self.links.custody
        try:
            custody.release(admission.held)
            admission.held = None
            await custody.released()
        except BaseException:
            commit.discard()
            raise

    async def _stream(
        self, request: web.Request, commit: Commit, dispatch: Dispatch
    ) -> web.StreamResponse:
        """Stream the committed response; learn the node's pace from it (docs/PLACEMENT.md)."""
        placed = dispatch.placed if 200 <= commit.upstream.status < 300 else None
        meter = OutputMeter(self._clock.monotonic) if placed is not None else None
        if placed is not None:
            self._choice.placer.first_byte(placed)
        # Silence after the first byte is bounded like silence before it; a member's, first by
        # the relay's shorter idle limit, then by its link (``liveness.py``).
        idle_s, extra_s = relay_idle(self.table, dispatch.target)
        watch = self._watch_peer(commit, dispatch, idle_s, extra_s)
        try:
            response = await stream_commit(
                request,
                commit,
                dispatch.job,
                write_deadline_s=self.policy.write_deadline_s,
                idle_s=idle_s,
                on_output=lambda: self._output(dispatch),
                on_chunk=meter.feed if meter is not None else None,
                translation=dispatch.translation,
                served_by=dispatch.target.node_id,
            )
        finally:
            if watch is not None:
                watch.close()
        if placed is not None and meter is not None and dispatch.job.outcome == "completed":
            self._choice.placer.completed(placed, meter)
        return response

    def _watch_peer(
        self, commit: Commit, dispatch: Dispatch, idle_s: float, extra_s: float
    ) -> PeerStreamWatch | None:
        """A member's stream is watched while it flows; this computer's engines' are not."""
        if dispatch.target.kind != "peer" or commit.watchdog is None:
            return None
        return PeerStreamWatch(
            self._departures, dispatch.target, commit.watchdog, self._table_now, idle_s, extra_s
        )

    def _table_now(self) -> ProxyTargets:
        return self.table

    def _started(self, dispatch: Dispatch) -> None:
        if dispatch.running:
            return
        dispatch.running = True
        dispatch.job.started(NodeId(dispatch.target.node_id), dispatch.attempt)
        self.links.on_started(dispatch.job.key, dispatch.attempt)

    def _output(self, dispatch: Dispatch) -> None:
        """A 2xx response starts streaming: it holds a slot, and the job is Running."""
        self._started(dispatch)

    async def _precommit(
        self, request: web.Request, admission: Admission, dispatch: Dispatch
    ) -> Commit | Failure | Moved:
        body = dispatch.body(admission)
        if dispatch.target.kind == "local":
            scheduler = self.scheduler(dispatch.target.engine)
            custody, waiting = self.links.custody, self.waiting
            admitted = await admit_local(scheduler, custody, waiting, request, admission, dispatch)
            if not isinstance(admitted, bytes):
                return admitted
            body = admitted
        targets = self.table
        timeouts = Timeouts(targets.header_timeout_s, targets.first_content_timeout_s)
        return await send(self.links, request, admission, dispatch, body, timeouts)
