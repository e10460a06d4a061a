"""The proxy worker's serving loop: one aiohttp runner per front door and one for the relay, on
sockets inherited from the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import ssl
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from backend.common.connection_limits import ConnectionCounter, limits_for
from backend.common.fd_limit import open_file_limit
from backend.core.bad_requests import BadRequestLimiter, BadRequestLog
from backend.core.clock import Clock
from backend.core.guarded_site import ConnectionGuard, GuardedSite
from backend.core.lan_tcp import LAN_CONNECT_TIMEOUT_S, lan_socket
from backend.protocol import errors
from backend.protocol.custody import Held
from backend.protocol.errors import BadResult
from backend.protocol.peer import RpcPeer
from backend.protocol.proxy import Door, ProxyTargets, SharedListenerName
from backend.protocol.types.apikeys import KeysUsed
from backend.protocol.types.jobs import JobEvent, JobEvents
from backend.protocol.types.results import Ok
from backend.protocol.types.scheduler import SchedulerStates
from backend.protocol.worker_methods import (
    PROXY_DEMAND,
    PROXY_EXCLUSIVE,
    PROXY_EXCLUSIVE_END,
    PROXY_IDENTITY,
    PROXY_JOBS,
    PROXY_JOBS_STORED,
    PROXY_KEYS_USED,
    PROXY_LOAD_MODEL,
    PROXY_SCHEDULER,
    PROXY_TARGETS,
)
from backend.workers import cpu_policy
from backend.workers.proxy.channels.custody import Custody, Primed
from backend.workers.proxy.channels.jobs import FLUSH_S as JOB_FLUSH_S
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.channels.journal import STORED_WAIT_S, JobJournal
from backend.workers.proxy.channels.listeners import ServedListeners
from backend.workers.proxy.channels.shared import FromShare, system_fromshare
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.app import build_app
from backend.workers.proxy.doors.key_use import KeyUseLog, report_interval
from backend.workers.proxy.relay.app import build_relay_app
from backend.workers.proxy.relay.peer_tls import PeerTls, credentials_from
from backend.workers.proxy.relay.serving import PeerStarted, RelayBoard
from backend.workers.proxy.routing.demand import REPORT_EVERY_S, Demand
from backend.workers.proxy.routing.dispatch import Router
from backend.workers.proxy.routing.failover import RandomSource, RetryPolicy
from backend.workers.proxy.routing.links import Links
from backend.workers.proxy.scheduler.engine_scheduler import Ticket
from backend.workers.proxy.upstream.attempt import SentRequest
from backend.workers.proxy.upstream.engine_client import EngineClient
from backend.workers.proxy.upstream.engine_keys import EngineKeys

log = logging.getLogger(__name__)

CLEANUP_TIMEOUT_S = 3.0
SCHEDULER_PUSH_S = 0.25
# A model switch may load a large model from disk: the broker's own bound is the engine's
# readiness timeout; this one only keeps a lost broker from holding the queue forever.
LOAD_MODEL_TIMEOUT_S = 3600.0
# Comma-separated seconds replacing the 1, 2, 4, 8 s backoff between retry rounds (tests).
BACKOFF_ENV = "PAIR_PROXY_RETRY_BACKOFF_S"
# Seconds a client may leave a chunk unread before it is cut (default 30).
WRITE_DEADLINE_ENV = "PAIR_PROXY_WRITE_DEADLINE_S"
# "off" turns KV affinity off (slots first-free, arrival order, no node affinity): the
# benchmark's baseline. Slot ownership and its erases stay on whatever it says.
AFFINITY_ENV = "PAIR_SCHEDULER_AFFINITY"

Notify = Callable[[str, Any], None]


class ProxyService:
    """Owns the upstream session (one connection pool per upstream and TLS context, shared by
    every door), the router, the doors and the relay listener.

    The doors start serving only once the broker has sent the first targets (and every listener
    named in ``shared``, which the broker shares over RPC: ``channels/shared.py``), the relay
    once it has also sent this node's identity; until then the kernel holds incoming connections
    in the listening sockets' backlog. ``clock`` and ``rng`` drive the router's dispatch budget,
    busy holds and backoff jitter.
    """

    def __init__(
        self,
        fds: Mapping[Door, int],
        *,
        clock: Clock,
        rng: RandomSource,
        relay_fd: int | None = None,
        journal_dir: Path | None = None,
        handover_fd: int | None = None,
        custody_fd: int | None = None,
        shared: Collection[SharedListenerName] = (),
        fromshare: FromShare = system_fromshare,
    ) -> None:
        self._closing = asyncio.Event()
        self.listeners = ServedListeners(
            fds,
            guard=self._guard,
            closing=self._closing.is_set,
            relay_fd=relay_fd,
            handover_fd=handover_fd,
            shared=shared,
            fromshare=fromshare,
        )
        kept = socket.socket(fileno=custody_fd) if custody_fd is not None else None
        self._custody = Custody(kept)
        self._doors_up = asyncio.Event()
        self._journal_dir = journal_dir  # where job ends are journaled (None: not at all)
        self._clock = clock
        self._rng = rng
        self._tls = PeerTls()
        self._pending_targets: ProxyTargets | None = None
        self._router: Router | None = None
        self._have_targets = asyncio.Event()
        self._have_identity = asyncio.Event()
        self._notify: Notify = lambda method, params: None
        self._broker: RpcPeer | None = None
        self._leases: dict[str, tuple[str, Ticket]] = {}
        self._waiting_leases: dict[str, asyncio.Task[Any]] = {}
        self._push_due = False
        self._have_router = asyncio.Event()
        self._bad_requests = BadRequestLimiter()  # one limit for every listener
        self._engine_keys = EngineKeys()  # the keys of the engines PAIR launched with one
        # One for every door.
        self._key_use = KeyUseLog(self._send_keys_used, report_s=report_interval(os.environ))
        # The doors and the relay face the network: one set of connection caps for all.
        self._limits = limits_for(open_file_limit(), os.environ)
        self._connections = ConnectionCounter(self._limits)
        self._guards: dict[str, ConnectionGuard] = {}

    def bind_notify(self, notify: Notify) -> None:
        """Where job events go (the broker connection)."""
        self._notify = notify

    def bind_broker(self, peer: RpcPeer) -> None:
        """The broker connection: job events and scheduler states go to it, model switches
        are asked of it."""
        self._broker = peer
        self._notify = peer.notify

    # The engine schedulers, for the broker.

    async def exclusive(self, params: Any) -> Any:
        """``proxy:exclusive``: answered once the operation holds the drained engine."""
        lease = PROXY_EXCLUSIVE.convert_params(params)
        router = await self._ready_router()
        task = asyncio.current_task()
        assert task is not None
        self._waiting_leases[lease.lease] = task
        try:
            ticket = await router.scheduler(lease.engine).admit(lease.model or "", kind=lease.kind)
        finally:
            self._waiting_leases.pop(lease.lease, None)
        self._leases[lease.lease] = (lease.engine, ticket)
        return msgspec.to_builtins(Ok(ok=True))

    def on_exclusive_end(self, params: Any) -> None:
        """``proxy:exclusive-end``: release the engine (or stop waiting for it)."""
        try:
            lease = PROXY_EXCLUSIVE_END.decode(params).lease
        except BadResult as exc:
            log.error("ignoring a malformed exclusive-end: %s", exc)
            return
        waiting = self._waiting_leases.pop(lease, None)
        if waiting is not None:
            waiting.cancel()
        held = self._leases.pop(lease, None)
        if held is not None and self._router is not None:
            engine, ticket = held
            self._router.scheduler(engine).release(ticket)

    def scheduler_states(self) -> SchedulerStates:
        """Every local engine's scheduler now."""
        if self._router is None:
            return SchedulerStates(engines=[])
        return SchedulerStates(engines=[s.state() for s in self._router.schedulers()])

    async def scheduler_get(self, _: Any) -> Any:
        """``proxy:scheduler-get``."""
        return msgspec.to_builtins(self.scheduler_states())

    def _scheduler_changed(self) -> None:
        """Push the states at most every ``SCHEDULER_PUSH_S`` (the last change always goes)."""
        if self._push_due:
            return
        self._push_due = True
        asyncio.get_running_loop().call_later(SCHEDULER_PUSH_S, self._push_states)

    def _send_jobs(self, events: list[JobEvent]) -> None:
        # Encoded straight from the structs by the channel (no per-event dictionaries).
        self._notify(PROXY_JOBS.name, JobEvents(events=events))

    def _job_log(self) -> JobLog:
        """This run's job log, journaling job ends in ``journal_dir`` when given."""
        jobs = JobLog(self._send_jobs, flush_s=JOB_FLUSH_S)
        if self._journal_dir is not None:
            try:
                jobs.journal = JobJournal(self._journal_dir, jobs.run_id)
            except OSError as exc:  # the doors serve all the same
                log.warning("job ends are not journaled: %s", exc)
        return jobs

    async def _jobs_stored(self) -> None:
        broker = self._broker
        if broker is not None and not broker.closed:
            await broker.call(PROXY_JOBS_STORED.name, timeout=STORED_WAIT_S)

    def _send_keys_used(self, report: KeysUsed) -> None:
        self._notify(PROXY_KEYS_USED.name, report)

    async def _report_demand(self, demand: Demand) -> None:
        """Send what the doors and the engines saw, every ``REPORT_EVERY_S`` while anything
        changed (the replica planner's input); nothing while idle, and no wake either: after a
        period with nothing to tell it waits for the next change."""
        while True:
            await self._clock.sleep(REPORT_EVERY_S)
            report = demand.report(self._clock.wall())
            if report is not None:
                self._notify(PROXY_DEMAND.name, report)
            else:
                await demand.until_changed()

    def _push_states(self) -> None:
        self._push_due = False
        self._notify(PROXY_SCHEDULER.name, msgspec.to_builtins(self.scheduler_states()))

    async def _load_model(self, engine: str, model: str) -> int:
        broker = self._broker
        if broker is None or broker.closed:
            raise errors.Unavailable("the broker is not connected")
        params = {"engine": engine, "model": model}
        answer = await broker.call(PROXY_LOAD_MODEL.name, params, timeout=LOAD_MODEL_TIMEOUT_S)
        return PROXY_LOAD_MODEL.decode_result(answer).instance

    async def _ready_router(self) -> Router:
        await self._have_router.wait()
        assert self._router is not None
        return self._router

    def on_identity(self, params: Any) -> None:
        """``proxy:identity``: this node's certificate and key, for the relay both ways."""
        try:
            credentials = credentials_from(PROXY_IDENTITY.decode(params))
        except (BadResult, ValueError) as exc:
            # The payload holds the private key: name the problem, never the payload.
            log.error("ignoring an unusable node identity: %s", type(exc).__name__)
            return
        self._tls.adopt_identity(credentials)
        self._have_identity.set()

    def on_targets(self, params: Any) -> None:
        """``proxy:targets``: adopt the broker's routing table (and its trusted members)."""
        try:
            targets = PROXY_TARGETS.decode(params)
        except BadResult as exc:
            log.error("ignoring malformed proxy targets: %s", exc)
            return
        self._tls.follow(targets)
        self._engine_keys.follow(targets)
        if self._router is not None:
            self._router.update(targets)
        else:
            self._pending_targets = targets
        self._have_targets.set()

    def on_close_listeners(self, _: Any) -> None:
        """``proxy:close-listeners``: stop accepting; requests in flight go on."""
        self._closing.set()

    async def serve(self) -> None:
        """Serve every door and the relay until cancelled."""
        # Members' relays are on the LAN: a connect there takes milliseconds, and a pooled
        # connection over a link that died is found dead by keep-alive (``lan_tcp``); loopback
        # connections (this computer's engines) keep the defaults.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, socket_factory=lan_socket)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=LAN_CONNECT_TIMEOUT_S)
        options: dict[str, Any] = {
            "timeout": timeout,
            "auto_decompress": False,
            "request_class": SentRequest,
            "middlewares": (self._engine_keys.middleware,),
        }
        # The second try of a request whose pooled connection the engine had closed goes on a
        # new one: the pool may hold more connections the engine closed the same way.
        fresh = aiohttp.TCPConnector(limit=0, force_close=True, socket_factory=lan_socket)
        async with (
            aiohttp.ClientSession(connector=connector, **options) as session,
            aiohttp.ClientSession(connector=fresh, **options) as retry_session,
        ):
            board = RelayBoard()
            engines = EngineClient()
            engines.use_keys(self._engine_keys.current())
            self._engine_keys.on_change(engines.use_keys)
            links = Links(
                session=session,
                retry_session=retry_session,
                engines=engines,
                peer_tls=self._tls,
                jobs=self._job_log(),
                custody=self._custody,
                load_model=self._load_model,
                on_started=board.started,
                on_scheduler_change=self._scheduler_changed,
                peer_started=PeerStarted(session, self._tls),
            )
            router = Router(
                links,
                clock=self._clock,
                rng=self._rng,
                policy=retry_policy(os.environ),
                affinity=os.environ.get(AFFINITY_ENV, "on") != "off",
                cpu=cpu_policy.governor(os.environ, self._clock.monotonic),
            )
            self._custody.start(self._replay)
            self._router = router
            self._have_router.set()
            runners: list[web.AppRunner] = []
            try:
                await self._serve(router, board, runners)
            finally:
                self._custody.close()
                await asyncio.shield(_cleanup(runners))
                await router.close()
                router.jobs.flush()
                self._key_use.flush()

    async def _serve(self, router: Router, board: RelayBoard, runners: list[web.AppRunner]) -> None:
        listeners = self.listeners
        await listeners.wait_complete()  # no door is served before it is ours
        await self._have_targets.wait()
        if self._pending_targets is not None:
            router.update(self._pending_targets)
        contexts: dict[str, DoorContext] = {
            door: DoorContext(door, router, board, self._key_use) for door in listeners.fds
        }
        async with listeners.lock:
            for door, fd in listeners.fds.items():
                runner, listeners.door_sites[door] = await self._start_door(contexts[door], fd)
                listeners.runners[door] = runner
                runners.append(runner)
        self._doors_up.set()
        log.info("serving front doors: %s", ", ".join(listeners.fds))
        async with asyncio.TaskGroup() as group:
            relay = group.create_task(
                self._start_relay(contexts, board, runners), name="proxy:relay"
            )
            journal = router.jobs.journal
            if journal is not None:  # confirmed segments deleted in the background
                group.create_task(
                    journal.keep_trimmed(self._jobs_stored, router.jobs.flush),
                    name="proxy:journal",
                )
            demand = group.create_task(self._report_demand(router.demand), name="proxy:demand")
            await self._closing.wait()
            relay.cancel()
            demand.cancel()
            for site in self.listeners.sites:
                await site.stop()
        await asyncio.Event().wait()

    async def _replay(self, held: Held, conn: socket.socket, raw: bytes) -> None:
        """Serve a request a killed predecessor held, on its client's connection."""
        await self._doors_up.wait()
        runner = self.listeners.runners.get(held.door)
        server = runner.server if runner is not None else None
        if server is None or self._closing.is_set():
            conn.close()
            return
        custody = self._custody

        def primed() -> Primed:
            return Primed(server(), raw, lambda t: custody.expect(t, held), custody.forget)

        try:
            await asyncio.get_running_loop().connect_accepted_socket(primed, conn)
        except OSError as exc:
            log.info("a request given back could not be served: %s", exc)
            conn.close()
            return
        log.info("serving job %s, which waited when the last proxy worker stopped", held.job)

    async def _start_door(
        self, context: DoorContext, fd: int
    ) -> tuple[web.AppRunner, web.SockSite]:
        return await self._start(build_app(context), fd, None, f"front door {context.door}")

    async def _start_relay(
        self, contexts: Mapping[str, DoorContext], board: RelayBoard, runners: list[web.AppRunner]
    ) -> None:
        relay_fd = self.listeners.relay_fd
        if relay_fd is None:
            return
        await self._have_identity.wait()
        app = build_relay_app(contexts, board, self._tls)
        runner, _ = await self._start(app, relay_fd, self._tls.server_context(), "relay")
        runners.append(runner)
        log.info("serving the relay (mutual TLS) to paired computers")

    async def _start(
        self, app: web.Application, fd: int, ssl_context: ssl.SSLContext | None, listener: str
    ) -> tuple[web.AppRunner, web.SockSite]:
        # handler_cancellation: a client that hangs up cancels its handler, which closes the
        # upstream request so the engine frees the slot (a peer's relay hop included). Doors
        # and relay may face the LAN: junk gets one short line, rate-limited (bad_requests),
        # and slow or excess connections are closed (guarded_site).
        logger = BadRequestLog(listener, log, limiter=self._bad_requests)
        runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            logger=logger,
            keepalive_timeout=self._limits.keepalive_timeout_s,
        )
        await runner.setup()
        sock = socket.socket(fileno=fd)
        site = GuardedSite(runner, sock, self._guard(listener), ssl_context=ssl_context)
        await site.start()
        self.listeners.sites.append(site)
        return runner, site

    def _guard(self, listener: str) -> ConnectionGuard:
        """The listener's guard (kept when a door moves: its deadlines go on)."""
        guard = self._guards.get(listener)
        if guard is None:
            guard = self._guards[listener] = ConnectionGuard(listener, self._connections, log)
        return guard


def retry_policy(environment: Mapping[str, str]) -> RetryPolicy:
    """The retry policy, with the backoff and write deadline from the environment if valid."""
    default = RetryPolicy()
    schedule = _seconds(environment, BACKOFF_ENV) or default.schedule
    deadline = _seconds(environment, WRITE_DEADLINE_ENV)
    write_deadline = deadline[0] if deadline and deadline[0] > 0 else default.write_deadline_s
    return RetryPolicy(schedule=schedule, write_deadline_s=write_deadline)


def _seconds(environment: Mapping[str, str], name: str) -> tuple[float, ...]:
    text = environment.get(name)
    if not text:
        return ()
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not math.isfinite(value) or value < 0 for value in values):
        log.warning("%s=%r is not seconds (comma-separated); using the default", name, text)
        return ()
    return values


async def _cleanup(runners: list[web.AppRunner]) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLEANUP_TIMEOUT_S):
            for runner in runners:
                await runner.cleanup()
