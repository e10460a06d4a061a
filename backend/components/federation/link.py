"""One member link, the dialling side: this broker's JSON-RPC session with one other member's
broker over mutual TLS (a WebSocket on its node API, ``server.LINK_PATH``).

While the link is up it mirrors three things of the member's own (never what the member itself
mirrors of others): its engines, models and progress (the numbered ``engine`` stream), its open
errors (``errors:update`` is only a signal: the list is fetched again, so answers cannot
overtake each other) and the jobs its front doors received (the numbered ``jobs`` stream,
``origin`` = the member). A gap in a numbered stream, or anything malformed, closes the link;
the next one starts from fresh snapshots, so what was missed is backfilled. An engine event of
a kind this node does not know (a newer member's) only counts in its stream. The member's
schedulers are not mirrored: ``engine:scheduler`` with its ``node`` asks for them.

Calls meant for the member (``node`` set) go over the same session with a bounded time. A
connect that fails marks the member unreachable (one error, ``UNREACHABLE_ID``); the link tries
again after 1, 2, 4, 8, then every 10 s, or, for a member whose link was up within the last
``RECENTLY_UP_S``, after 0.5, 1, then every 2 s, so a member that comes back after a short
outage is linked (and routable) again within seconds. Every address of the member is dialled
at once (``dial``); a connect that has not finished in ``CONNECT_TIMEOUT_S`` has failed, and
the link's socket has TCP keep-alive (``lan_tcp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, get_args

import aiohttp
import msgspec

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.common.tasks import TaskSet
from backend.components.cluster.members import Member
from backend.components.federation import websocket
from backend.components.federation.dial import LinkFailed, dial
from backend.core.clock import Clock
from backend.core.lan_tcp import LAN_CONNECT_TIMEOUT_S, lan_socket
from backend.protocol import contract, errors, methods
from backend.protocol.contract import Method
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import JobKey, NodeId
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.engines import (
    EngineEvent,
    EngineModelsChanged,
    EngineSchedulerChanged,
    EnginesSnapshot,
    EngineStateChanged,
    InstallProgress,
    InstallProgressed,
    MemberEngines,
    PullProgress,
    PullProgressed,
)
from backend.protocol.types.jobs import (
    JobRecord,
    JobRemoved,
    JobsEvent,
    JobsQuery,
    JobUpserted,
)

log = logging.getLogger(__name__)

UNREACHABLE_ID = "cluster:unreachable"
CONNECT_TIMEOUT_S = LAN_CONNECT_TIMEOUT_S
SYNC_TIMEOUT_S = 15.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 10.0)
RECENT_BACKOFF_S = (0.5, 1.0, 2.0)
RECENTLY_UP_S = 600.0
UNREACHABLE_AFTER = 2  # failed connects in a row
MIRRORED_JOBS = 1000
MAX_MIRRORED_ERRORS = 200
MAX_HELD_EVENTS = 5000
# How long a forwarded call may take: installs, updates and model actions (a pull, a cold load)
# can run for many minutes; starting waits for readiness; the rest answer at once.
LONG_CALL_S = 3600.0
READY_CALL_S = 660.0
SHORT_CALL_S = 30.0
_LONG = frozenset({"engine:install", "engine:update", "engine:action"})
_READY = frozenset({"engine:start", "engine:restart", "engine:stop", "engine:set-port"})
_KNOWN_ENGINE_EVENTS = frozenset(kind.__struct_config__.tag for kind in get_args(EngineEvent))


def call_timeout(method: Method[Any, Any]) -> float:
    """The bound on a forwarded call of ``method``."""
    if method.name in _LONG:
        return LONG_CALL_S
    if method.name in _READY:
        return READY_CALL_S
    return SHORT_CALL_S


class LinkSinks(msgspec.Struct, frozen=True):
    """Where a member's mirrored state goes on this node."""

    engines: Callable[[MemberEngines], None]
    errors: Callable[[NodeId, list[ServiceError]], None]
    jobs: Callable[[NodeId, Sequence[JobRecord], bool], None]
    job_removed: Callable[[NodeId, JobKey], None]


def _ignore(*_: Any) -> None:
    pass


# Where a retired link's news goes: nowhere.
_RETIRED = LinkSinks(engines=_ignore, errors=_ignore, jobs=_ignore, job_removed=_ignore)


class _Resync(Exception):
    """The member's streams must be read again from snapshots (a gap, a malformed push)."""


class MemberLink:
    """Owns the session with one member (a task per session and the errors fetch)."""

    def __init__(
        self,
        member: Member,
        *,
        credentials: NodeCredentials,
        addresses: Callable[[], list[tuple[str, int]]],
        sinks: LinkSinks,
        clock: Clock,
    ) -> None:
        self.node_id = member.node_id
        self.name = member.name
        self._cert = member.cert_der
        self._credentials = credentials
        self._addresses = addresses
        self._sinks = sinks
        self._clock = clock
        self._peer: RpcPeer | None = None
        self._reason = "not connected yet"
        self._state = MemberEngines(node_id=member.node_id, name=member.name, reachable=False)
        self._engine_seq: int | None = None
        self._jobs_seq: int | None = None
        self._held: list[tuple[str, Any]] = []
        self._errors_wanted = asyncio.Event()
        self._tasks = TaskSet(f"link:{member.name}")
        self._unreachable = False
        self._failures = 0  # connects that failed in a row
        self._up_until: float | None = None  # when the link was last up (monotonic)

    @property
    def state(self) -> MemberEngines:
        """The member's engines as last heard (``reachable`` says whether the link is up)."""
        return self._state

    def renamed(self, name: str) -> None:
        """The member has a new name."""
        if name != self.name:
            self.name = name
            self._publish(msgspec.structs.replace(self._state, name=name))

    def retire(self) -> None:
        """The node is no longer a member: nothing the link hears or notices from now on
        (while its cancelled task winds down: the session lost, an errors fetch that was under
        way) reaches the sinks, so the member does not come back once it has been dropped."""
        self._sinks = _RETIRED

    async def run(self) -> None:
        """Keep a session with the member until cancelled."""
        attempt = 0
        try:
            while True:
                try:
                    await self._session()
                    attempt = 0  # it was up: try again at once before calling it unreachable
                    continue
                except LinkFailed as exc:
                    self._went_unreachable(str(exc))
                except Exception as exc:  # a bug must not end the link for good
                    log.exception("member link to %s failed", self.name)
                    self._went_unreachable(f"internal error: {type(exc).__name__}")
                await self._clock.sleep(self._backoff(attempt))
                attempt += 1
        finally:
            await self._tasks.close(timeout=1.0)

    def _backoff(self, attempt: int) -> float:
        """Seconds before the next try after ``attempt`` failed ones in a row."""
        recent = self._up_until is not None and (
            self._clock.monotonic() - self._up_until < RECENTLY_UP_S
        )
        schedule = RECENT_BACKOFF_S if recent else BACKOFF_S
        return schedule[min(attempt, len(schedule) - 1)]

    async def call(self, method: Method[Any, Any], params: Any) -> Any:
        """Call ``method`` on the member and return its typed answer; its errors unchanged."""
        peer = self._peer
        if peer is None or peer.closed:
            raise errors.Unavailable(f"{self.name} is unreachable: {self._reason}")
        timeout = call_timeout(method)
        try:
            return await contract.call(peer, method, params, timeout=timeout)
        except errors.CallTimeout:
            raise errors.Unavailable(
                f"{self.name} did not answer {method.name} within {timeout:g} s"
            ) from None
        except errors.ConnectionLost:
            raise errors.Unavailable(
                f"the link to {self.name} was lost during {method.name}"
            ) from None

    # One session ------------------------------------------------------------------------------

    async def _session(self) -> None:
        context = tls.client_context(self._credentials, self._cert)
        connector = aiohttp.TCPConnector(ssl=context, force_close=True, socket_factory=lan_socket)
        async with aiohttp.ClientSession(connector=connector) as session:
            socket = await dial(session, context, self._addresses(), timeout=CONNECT_TIMEOUT_S)
            peer, reader = websocket.peer_over(
                socket, name=f"link:{self.name}", on_notification=self._on_push
            )
            # Down the moment the link is found dead, before its bounded close.
            serving = asyncio.create_task(websocket.serve(socket, peer, reader, on_lost=self._down))
            try:
                try:
                    await self._sync(peer)
                except (_Resync, errors.RpcError, TimeoutError) as exc:
                    raise LinkFailed(f"the link opened but could not be read ({exc})") from None
                log.info("member link to %s (%s) up", self.name, self.node_id)
                await asyncio.shield(serving)
            finally:
                self._down("the link was lost")
                peer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(serving), timeout=2.0)
                if not serving.done():
                    peer.abort()
                    serving.cancel()

    async def _sync(self, peer: RpcPeer) -> None:
        self._held = []
        self._engine_seq = self._jobs_seq = None
        self._peer = peer
        async with asyncio.timeout(SYNC_TIMEOUT_S):
            engines = await contract.call(peer, methods.ENGINE_SUBSCRIBE)
            query = JobsQuery(limit=MIRRORED_JOBS, origin=self.node_id)
            records = await contract.call(peer, methods.JOBS_SUBSCRIBE, query)
        self._unreachable = False
        self._failures = 0
        self._reason = ""
        self._engine_seq = engines.seq
        self._publish(_member_state(self._state, engines))
        self._jobs_seq = records.seq
        # A full page may leave older unfinished jobs out: only a shorter one lists them all.
        complete = len(records.jobs) < MIRRORED_JOBS
        self._sinks.jobs(self.node_id, records.jobs, complete)
        held, self._held = self._held, []
        for method, params in held:
            self._apply_push(method, params)
        self._errors_wanted.set()
        self._tasks.spawn(self._fetch_errors(peer), name="errors")

    def _down(self, reason: str) -> None:
        """The link is lost (said once: a second call keeps the first reason)."""
        if self._peer is None and not self._state.reachable:
            return
        self._peer = None
        self._engine_seq = self._jobs_seq = None
        self._reason = reason
        if self._state.reachable:
            self._up_until = self._clock.monotonic()
            self._publish(msgspec.structs.replace(self._state, reachable=False, error=reason))

    def _went_unreachable(self, reason: str) -> None:
        self._reason = reason
        self._publish(msgspec.structs.replace(self._state, reachable=False, error=reason))
        self._failures += 1
        # One failure alone is not news: right after a pairing the other side may not have
        # finished trusting this node yet (it answers 403 for a moment).
        if self._unreachable or self._failures < UNREACHABLE_AFTER:
            return
        self._unreachable = True
        log.warning("member %s (%s) is unreachable: %s", self.name, self.node_id, reason)
        now = self._clock.wall()
        entry = ServiceError(
            id=UNREACHABLE_ID,
            node_id=self.node_id,
            message=(
                f"{self.name} cannot be reached ({reason}). PAIR keeps trying; its engines "
                "and jobs show as they were last seen."
            ),
            severity="warning",
            created_at=now,
            updated_at=now,
        )
        self._sinks.errors(self.node_id, [entry])

    # Pushes from the member -----------------------------------------------------------------

    def _on_push(self, method: str, params: Any, peer: RpcPeer) -> None:
        if method == methods.ERRORS_UPDATE.name:
            self._errors_wanted.set()
            return
        if method not in (methods.ENGINE_EVENT.name, methods.JOBS_EVENT.name):
            return  # settings and the like are the member's own business
        if self._engine_seq is None or self._jobs_seq is None:
            if len(self._held) >= MAX_HELD_EVENTS:
                peer.close()
                return
            self._held.append((method, params))
            return
        try:
            self._apply_push(method, params)
        except _Resync as exc:
            log.warning("member link to %s: %s; reading it again", self.name, exc)
            peer.close()

    def _apply_push(self, method: str, params: Any) -> None:
        try:
            if method == methods.ENGINE_EVENT.name:
                seq = _newer_event_seq(params)
                newer = _NewerEvent(seq=seq) if seq is not None else None
                self._engine_event(newer or methods.ENGINE_EVENT.decode(params))
            else:
                self._jobs_event(methods.JOBS_EVENT.decode(params))
        except errors.BadResult as exc:
            raise _Resync(f"malformed push: {exc}") from None

    def _engine_event(self, event: EngineEvent | _NewerEvent) -> None:
        assert self._engine_seq is not None
        if event.seq <= self._engine_seq:
            return  # before the snapshot
        if event.seq != self._engine_seq + 1:
            raise _Resync(f"engine events {self._engine_seq + 1}-{event.seq - 1} are missing")
        self._engine_seq = event.seq
        state = self._state
        match event:
            case EngineStateChanged(status=status):
                others = [e for e in state.engines if e.engine != status.engine]
                engines = sorted([*others, status], key=lambda e: e.engine)
                self._publish(msgspec.structs.replace(state, engines=engines))
            case EngineModelsChanged(models=models):
                self._publish(msgspec.structs.replace(state, models=models))
            case PullProgressed(progress=progress):
                self._publish(msgspec.structs.replace(state, pulls=_pulls(state.pulls, progress)))
                if progress.done:  # shown once as done, then no longer in progress
                    self._state = msgspec.structs.replace(
                        self._state, pulls=[p for p in self._state.pulls if not p.done]
                    )
            case InstallProgressed(progress=progress):
                installs = _installs(state.installs, progress)
                self._publish(msgspec.structs.replace(state, installs=installs))
                if progress.done:
                    self._state = msgspec.structs.replace(
                        self._state, installs=[i for i in self._state.installs if not i.done]
                    )
            case EngineSchedulerChanged():
                # Its queues change up to 4 times a second and are only of use to someone
                # looking at them: ``engine:scheduler`` with its ``node`` asks for them then.
                pass
            case _:
                pass  # what the member mirrors of others is theirs to tell

    def _jobs_event(self, event: JobsEvent) -> None:
        assert self._jobs_seq is not None
        if event.seq <= self._jobs_seq:
            return
        if event.seq != self._jobs_seq + 1:
            raise _Resync(f"job events {self._jobs_seq + 1}-{event.seq - 1} are missing")
        self._jobs_seq = event.seq
        match event:
            case JobUpserted(job=record) if record.origin == self.node_id:
                self._sinks.jobs(self.node_id, [record], False)
            case JobRemoved(key=key):
                self._sinks.job_removed(self.node_id, key)
            case _:
                pass

    async def _fetch_errors(self, peer: RpcPeer) -> None:
        """Fetch the member's errors whenever it says they changed, one fetch at a time."""
        while not peer.closed:
            await self._errors_wanted.wait()
            self._errors_wanted.clear()
            try:
                entries = await contract.call(
                    peer, methods.ERRORS_GET_INITIAL, timeout=SHORT_CALL_S
                )
            except errors.RpcError as exc:
                log.debug("errors of %s not fetched: %s", self.name, exc)
                return
            if self._peer is not peer:
                return
            own = [entry for entry in entries if entry.node_id == self.node_id]
            self._sinks.errors(self.node_id, own[:MAX_MIRRORED_ERRORS])

    def _publish(self, state: MemberEngines) -> None:
        self._state = state
        self._sinks.engines(state)


class _NewerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An engine event of a kind this node does not know (a newer member's): numbered like the
    others, so it counts in the stream, and otherwise ignored."""

    seq: int


def _newer_event_seq(params: Any) -> int | None:
    """The ``seq`` of an engine event whose kind this node does not know, else None."""
    if not isinstance(params, dict):
        return None
    kind, seq = params.get("event"), params.get("seq")
    known = not isinstance(kind, str) or kind in _KNOWN_ENGINE_EVENTS
    return seq if not known and type(seq) is int and seq > 0 else None


def _member_state(previous: MemberEngines, snapshot: EnginesSnapshot) -> MemberEngines:
    return MemberEngines(
        node_id=previous.node_id,
        name=previous.name,
        reachable=True,
        engines=sorted(snapshot.engines, key=lambda e: e.engine),
        models=snapshot.models,
        pulls=snapshot.pulls,
        installs=snapshot.installs,
    )


def _pulls(pulls: list[PullProgress], progress: PullProgress) -> list[PullProgress]:
    others = [p for p in pulls if (p.engine, p.model) != (progress.engine, progress.model)]
    return [*others, progress]


def _installs(installs: list[InstallProgress], progress: InstallProgress) -> list[InstallProgress]:
    return [*(i for i in installs if i.engine != progress.engine), progress]
