"""Carrying out the planner's loads and unloads, and what became of each.

A load here goes to this node's engines (``engine:action`` ``load_model`` with ``replica``
and its reason: it waits on the engine's exclusive gate); on a member it is the same call
forwarded over the member link. One load per member at a time; a load that failed is not
tried again on that member and engine for ``RETRY_AFTER_S`` (its error stays in the status
meanwhile). Each action is also a job (path ``replica:load`` / ``replica:unload``, its reason
as the note) so it shows wherever requests' jobs do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from functools import partial

import msgspec

from backend.components.replicas.plan import Action, Load, Unload
from backend.core.clock import Clock
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.engines import EngineActionParams
from backend.protocol.types.jobs import JobEvent, JobEventKind
from backend.protocol.types.replicas import ReplicaInfo, ReplicaState

log = logging.getLogger(__name__)

RETRY_AFTER_S = 60.0
# The engine's own load has a deadline; this only bounds a call that never answers at all.
LOAD_DEADLINE_S = 900.0
# A member's node-info lists a model it loaded only after its next poll: until then (or this
# long) the member counts as loading, so the same load is not asked for twice.
SETTLE_S = 30.0
STOPPED = "interrupted: the replica planner stopped"
# A failure stays in the status this long unless the planner asks for the action again.
FAILED_SHOWN_S = 600.0

EngineAction = Callable[[EngineActionParams], Awaitable[object]]
RecordJobs = Callable[[Sequence[JobEvent]], None]
Key = tuple[str, str, str]  # member, engine, the engine's name for the model


class Job(msgspec.Struct, frozen=True):
    """The job that shows one action: its key and header."""

    key: str
    path: str
    model: str
    engine: str
    target: str
    note: str
    created_at: float


class Actions:
    """The replicas this node's planner manages (``ReplicaInfo`` by member, engine and name),
    the members with a load in flight and the failed loads' times. Owns no tasks: ``begin``
    returns the work, which the component runs in its own task group."""

    def __init__(
        self,
        *,
        node_id: str,
        node_name: Callable[[], str],
        clock: Clock,
        local_action: EngineAction,
        member_action: EngineAction,
        record_jobs: RecordJobs,
        run_id: str,
        retry_after_s: float = RETRY_AFTER_S,
        deadline_s: float = LOAD_DEADLINE_S,
    ) -> None:
        self._node_id = node_id
        self._node_name = node_name
        self._clock = clock
        self._local_action = local_action
        self._member_action = member_action
        self._record_jobs = record_jobs
        self._run_id = run_id
        self._retry_after_s = retry_after_s
        self._deadline_s = deadline_s
        self._replicas: dict[Key, ReplicaInfo] = {}
        self._loading: set[str] = set()
        self._failed_at: dict[Key, float] = {}
        self._seen: set[Key] = set()  # ready replicas the member's node-info lists as loaded
        self._jobs = 0

    def loading(self) -> frozenset[str]:
        """The members where a load this planner started has not ended, or ended so lately
        that their node-info may not list the model as loaded yet (``SETTLE_S``)."""
        now = self._clock.wall()
        settling = {
            key[0]
            for key, info in self._replicas.items()
            if info.state == "ready" and key not in self._seen and now - info.since < SETTLE_S
        }
        return frozenset(self._loading | settling)

    def infos(self) -> list[ReplicaInfo]:
        """The replicas managed, by member, engine and name."""
        return [self._replicas[key] for key in sorted(self._replicas)]

    def forget_gone(self, resident: Collection[Key]) -> None:
        """Drop the ready replicas no longer resident where they were loaded (unloaded there):
        once seen resident, or ``SETTLE_S`` after the load said it was done; and the failures
        older than ``FAILED_SHOWN_S``."""
        now = self._clock.wall()
        for key, info in list(self._replicas.items()):
            if info.state == "failed" and now - info.since >= FAILED_SHOWN_S:
                del self._replicas[key]  # the planner has not asked again: the error is old
            if info.state != "ready":
                continue
            if key in resident:
                self._seen.add(key)
            elif key in self._seen or now - info.since >= SETTLE_S:
                del self._replicas[key]
                self._seen.discard(key)

    def begin(self, action: Action, *, ttl_s: float | None = None) -> Awaitable[None] | None:
        """Mark ``action`` started and return its work, or None when it may not run now (a load
        on a member already loading, or failed there lately; the same unload under way).
        ``ttl_s`` goes with a load: the member that holds the replica unloads it after this
        planner's TTL, not its own."""
        if isinstance(action, Load):
            return self._begin_load(action, ttl_s)
        return self._begin_unload(action)

    def _begin_load(self, load: Load, ttl_s: float | None) -> Awaitable[None] | None:
        key = (load.node_id, load.engine, load.name)
        if load.node_id in self.loading() or self._failed_lately(key):
            return None
        self._loading.add(load.node_id)
        self._seen.discard(key)
        self._set(key, load.model, load.node_name, "loading", load.reason)
        job = self._job("replica:load", load.model, load.engine, load.node_id, load.reason)
        node = None if load.node_id == self._node_id else NodeId(load.node_id)
        params = EngineActionParams(
            engine=EngineName(load.engine),
            action="load_model",
            model=load.name,
            node=node,
            replica=True,
            reason=load.reason,
            ttl_s=ttl_s,
        )
        call = self._local_action if node is None else self._member_action
        return self._load(key, load, job, partial(call, params))

    def _begin_unload(self, unload: Unload) -> Awaitable[None] | None:
        key = (self._node_id, unload.engine, unload.name)
        known = self._replicas.get(key)
        if (known is not None and known.state == "unloading") or self._failed_lately(key):
            return None
        model = known.model if known is not None else unload.name
        self._set(key, model, self._node_name(), "unloading", unload.reason)
        job = self._job("replica:unload", model, unload.engine, self._node_id, unload.reason)
        params = EngineActionParams(
            engine=EngineName(unload.engine), action="unload_model", model=unload.name
        )
        return self._unload(key, job, partial(self._local_action, params))

    def _failed_lately(self, key: Key) -> bool:
        failed = self._failed_at.get(key)
        return failed is not None and self._clock.monotonic() - failed < self._retry_after_s

    async def _load(
        self, key: Key, load: Load, job: Job, call: Callable[[], Awaitable[object]]
    ) -> None:
        try:
            error = await self._bounded(key, job, call)
        finally:
            self._loading.discard(load.node_id)
        if error is not None:
            log.warning(
                "replica of %s on %s: the load failed: %s", load.model, load.node_name, error
            )
            self._set(key, load.model, load.node_name, "failed", load.reason, error=error)
        else:
            self._set(key, load.model, load.node_name, "ready", load.reason)
            log.info("replica of %s loaded on %s: %s", load.model, load.node_name, load.reason)
        self._end(job, error)

    async def _unload(self, key: Key, job: Job, call: Callable[[], Awaitable[object]]) -> None:
        error = await self._bounded(key, job, call)
        if error is not None:
            log.warning("replica %s: the unload failed: %s", key[2], error)
            self._replicas[key] = _replace(self._replicas[key], state="failed", error=error)
        else:
            self._replicas.pop(key, None)
            log.info("replica %s unloaded from %s: %s", key[2], key[1], job.note)
        self._end(job, error)

    async def _bounded(
        self, key: Key, job: Job, call: Callable[[], Awaitable[object]]
    ) -> str | None:
        """Run ``call`` within the deadline; its error in words (None: it worked). A failure
        holds the key off for a while (``_failed_at``); a cancelled call ends its job first,
        so the job does not stay in flight while the broker runs on."""
        try:
            async with asyncio.timeout(self._deadline_s):
                await call()
        except asyncio.CancelledError:
            self._end(job, STOPPED)
            raise
        except Exception as exc:
            self._failed_at[key] = self._clock.monotonic()
            return str(exc) or type(exc).__name__
        self._failed_at.pop(key, None)
        return None

    def _set(
        self,
        key: Key,
        model: str,
        node_name: str,
        state: ReplicaState,
        reason: str,
        *,
        error: str | None = None,
    ) -> None:
        self._replicas[key] = ReplicaInfo(
            model=model,
            node_id=NodeId(key[0]),
            node_name=node_name,
            engine=EngineName(key[1]),
            name=key[2],
            state=state,
            reason=reason,
            since=self._clock.wall(),
            error=error,
        )

    def _job(self, path: str, model: str, engine: str, target: str, note: str) -> Job:
        self._jobs += 1
        key = f"{self._node_id}/{self._run_id}/{self._jobs}"
        job = Job(key, path, model, engine, target, note, self._clock.wall())
        self._record_jobs(
            [
                job_event(job, 1, "submitted", job.created_at),
                job_event(job, 2, "started", job.created_at),
            ]
        )
        return job

    def _end(self, job: Job, error: str | None) -> None:
        kind: JobEventKind = "completed" if error is None else "errored"
        self._record_jobs([job_event(job, 3, kind, self._clock.wall(), error=error)])


def job_event(
    job: Job, seq: int, kind: JobEventKind, at: float, *, error: str | None = None
) -> JobEvent:
    """One numbered event of an action's job (it runs at its target from the start)."""
    origin = job.key.split("/", 1)[0]
    return JobEvent(
        key=JobKey(job.key),
        seq=seq,
        kind=kind,
        attempt=0,
        at=at,
        engine=EngineName(job.engine),
        model=job.model,
        origin=NodeId(origin),
        run_id=job.key.split("/")[1],
        created_at=job.created_at,
        path=job.path,
        target=NodeId(job.target),
        node=NodeId(job.target) if kind == "started" else None,
        error=error,
        note=job.note,
    )


def _replace(info: ReplicaInfo, *, state: ReplicaState, error: str | None) -> ReplicaInfo:
    return msgspec.structs.replace(info, state=state, error=error)
