"""The jobs component: every job's state from the proxy's ``proxy:jobs`` reports, kept in
memory for snapshots, pushed as numbered ``jobs:event``s and written to the store."""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from backend.components.jobs.journal import (
    JournalFolders,
    LeftEnds,
    catch_up,
    read_current,
    read_left,
    settle,
)
from backend.components.jobs.reports import job_from_report, parse_report, report_problem, step_of
from backend.components.jobs.state import TERMINAL, Job, apply, apply_in_order, interrupted
from backend.components.jobs.state import JobEvent as Step
from backend.components.jobs.store import JobRecordStore
from backend.components.jobs.timeline import to_steps
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.rpc import NumberedStream
from backend.protocol import errors
from backend.protocol.types.base import JobKey, NodeId
from backend.protocol.types.jobs import (
    JobDetails,
    JobEvent,
    JobRecord,
    JobRemoved,
    JobsEvent,
    JobUpserted,
)

log = logging.getLogger(__name__)

WRITE_INTERVAL_S = 0.2
# A job whose next event has not come this long after a later one did applies the later ones:
# an event lost or dropped as malformed must not leave the job (and its node's load) stuck.
GAP_TIMEOUT_S = 3.0
MAX_WAITING = 64


class JobsComponent(Component):
    """Owns the jobs in memory (every unfinished one and the newest finished ones, the same set
    the ``jobs`` table keeps), the events waiting for a gap in a job's ``seq`` to fill, and one
    task that writes changes to the store every ``write_interval`` seconds and skips stale gaps
    while there are any (with none it waits without a timer).

    Ready once the stored jobs are loaded, with the job ends the proxy workers of earlier runs
    journaled (``journal.py``) applied, and unfinished jobs from an earlier run marked failed.
    """

    ready_on_start = False

    def __init__(
        self,
        *,
        store: JobRecordStore,
        clock: Clock,
        node_id: str,
        events: NumberedStream[JobsEvent],
        write_interval: float = WRITE_INTERVAL_S,
        gap_timeout: float = GAP_TIMEOUT_S,
        journal: JournalFolders | None = None,
    ) -> None:
        super().__init__("jobs")
        self.node_id = node_id
        self._store = store
        self._clock = clock
        self._events = events
        self._write_interval = write_interval
        self._gap_timeout = gap_timeout
        self._journal = journal
        self._jobs: dict[str, Job] = {}
        self._open: set[str] = set()
        self._waiting: dict[str, list[Step]] = {}
        self._gap_since: dict[str, float] = {}
        # Recently pruned keys, so a late report cannot bring a forgotten job back.
        self._forgotten: dict[str, None] = {}
        # Jobs served here for another member (``<its key>@<attempt>``), by that member's key.
        self._relays: dict[str, set[str]] = {}
        self._dirty: dict[str, float] = {}
        self._deleted: set[str] = set()
        # Changes applied so far, and how many of them are in the store: ``wait_stored``.
        self._changes = 0
        self._stored = 0
        self._loaded = False
        self._write_lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        # Set when there is something to write or a gap to watch: an idle node's loop sleeps
        # on it, not on a timer.
        self._work = asyncio.Event()

    @property
    def journal_dir(self) -> Path | None:
        """Where this run's proxy workers journal job ends (None: they do not)."""
        return self._journal.current if self._journal is not None else None

    # Queries ---------------------------------------------------------------------------------

    def records(self, limit: int, origin: NodeId | None = None) -> list[JobRecord]:
        """At most ``limit`` jobs, newest first (only those ``origin`` received, if given).

        A job served here for another member is one row with that member's own record of it:
        this node's copy (kept under ``<key>@<attempt>``) is left out once the member's is known.
        """
        jobs = (
            job
            for job in self._jobs.values()
            if self._visible(job.id) and (origin is None or job.origin == origin)
        )
        return [to_record(job) for job in heapq.nlargest(limit, jobs, key=_age)]

    def details(self, key: JobKey) -> JobDetails:
        """One job and its timeline (``jobs:get``); NotFound when the history has no such job."""
        job = self._jobs.get(key)
        if job is None:
            raise errors.NotFound(f"no job {key} in the history (finished jobs are kept a while)")
        return JobDetails(job=to_record(job), timeline=to_steps(job.timeline))

    def pending_by_node(self) -> dict[str, int]:
        """Unfinished jobs per node they are at: the serving node once running, else the target.

        Counts this node's own records only (its front doors' jobs and what it serves for
        others), not the jobs mirrored from other members (their own loads say those)."""
        counts: dict[str, int] = {}
        for key in self._open:
            job = self._jobs[key]
            if self._mirrored(job):
                continue
            node = job.serving if job.state == "running" else job.target
            if node is not None:
                counts[node] = counts.get(node, 0) + 1
        return counts

    # Reports ---------------------------------------------------------------------------------

    def on_job_event(self, params: Any) -> None:
        """Apply one ``proxy:jobs`` report; a malformed one is logged and dropped."""
        parsed = parse_report(params)
        if parsed is not None:
            self._apply_report(*parsed)

    def record_external(self, events: Sequence[JobEvent]) -> None:
        """Apply events of jobs this broker ran itself, not a request's (a replica planner's
        load or unload, with its ``note``); one the reducer cannot take is logged and dropped."""
        for report in events:
            problem = report_problem(report)
            if problem is not None:
                log.warning("job %r: event dropped: %s", report.key, problem)
                continue
            self._apply_report(report, step_of(report))

    def _apply_report(self, report: JobEvent, step: Step) -> None:
        known = self._jobs.get(report.key)
        if report.key in self._forgotten or (known is not None and known.state in TERMINAL):
            return
        before = known if known is not None else job_from_report(report)
        after, waiting = apply_in_order(before, [*self._waiting.get(report.key, ()), step])
        self._hold(after, waiting)
        if after != known:
            self._commit(after)

    async def clear_finished(self) -> int:
        """Forget every finished job (memory and store), pushing ``remove`` for each, oldest
        first; unfinished jobs stay. Returns how many were cleared."""
        if not self._loaded:
            # Stored jobs not loaded yet would come back once they are.
            raise errors.Unavailable("the jobs history is still loading")
        finished = [job for job in self._jobs.values() if job.state in TERMINAL]
        for job in sorted(finished, key=_age):
            self._forget(job.id)
        self._trim_forgotten()
        # Deleted under the write lock, so a write already under way cannot put one back.
        await self.write_pending()
        log.info("jobs: %d finished jobs cleared", len(finished))
        return len(finished)

    def progress(self, key: str) -> tuple[int, int] | None:
        """An open job's last event number (applied or waiting for a gap) and its attempt;
        None once it ended or when it is unknown."""
        job = self._jobs.get(JobKey(key))
        if job is None or key not in self._open:
            return None
        return max([job.seq, *(step.seq for step in self._waiting.get(job.id, []))]), job.attempt

    def fail_unfinished(self, error: str, keep: Collection[str] = ()) -> None:
        """Fail every unfinished job with ``error`` (the proxy worker that ran them exited),
        once what that worker journaled is applied (its last starts and ends may not have
        come by its pipe), except those in ``keep`` (their requests wait for the next worker); jobs
        mirrored from other members are theirs to finish."""
        open_jobs = {JobKey(key): self._jobs[JobKey(key)] for key in self._open}
        if self._journal is not None and open_jobs:
            # What the worker journaled but had not yet told: starts, and ends whose clients
            # have their answers.
            for job in catch_up(open_jobs, read_current(self._journal)).values():
                self._commit(job)
        at = self._clock.wall()
        for key in list(self._open):
            job = self._jobs[key]
            if key not in keep and not self._mirrored(job):
                self._commit(interrupted(job, at, error))

    # Other members' jobs -----------------------------------------------------------------------

    def mirror(self, member: NodeId, records: Sequence[JobRecord], *, complete: bool) -> int:
        """Take ``member``'s own record of the jobs it received (from its snapshot or events).

        Only jobs whose origin is ``member`` are accepted (a member speaks for its own front
        doors, nothing else); an older record than the one held is ignored. With ``complete``
        (a snapshot of every job it still has), its unfinished jobs held here but absent there
        are failed: the member no longer knows them. Returns how many jobs changed.
        """
        changed = 0
        seen: set[str] = set()
        for record in records:
            problem = _mirror_problem(member, record)
            if problem is not None:
                log.warning("jobs from %s: %r dropped: %s", member, record.key, problem)
                continue
            seen.add(record.key)
            known = self._jobs.get(record.key)
            if record.key in self._forgotten or (known is not None and known.seq > record.seq):
                continue
            job = from_record(record)
            if job != known:
                self._commit(job)
                changed += 1
        if complete:
            at = self._clock.wall()
            for key in list(self._open):
                job = self._jobs[key]
                if job.origin == member and self._mirrored(job) and key not in seen:
                    self._commit(interrupted(job, at, f"lost: {member} no longer knows this job"))
                    changed += 1
        return changed

    def mirror_jobs(self, member: NodeId, records: Sequence[JobRecord], complete: bool) -> None:
        """``mirror`` as a member link's sink."""
        self.mirror(member, records, complete=complete)

    def mirror_removed(self, member: NodeId, key: JobKey) -> None:
        """``member`` dropped one of its own jobs from its history: drop it here too."""
        job = self._jobs.get(key)
        if job is not None and job.origin == member and self._mirrored(job):
            self._forget(key)

    # Component -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Load the stored jobs once, then write changes until stopped."""
        self._stopped.clear()
        await self._load_once()
        self.announce_ready()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._write_loop(), name="jobs:write")
                await self._stopped.wait()
                raise _Stopped
        except* _Stopped:
            pass
        finally:
            await asyncio.shield(self._write_last())

    async def stop(self) -> None:
        """Write what is pending and stop."""
        self._stopped.set()

    async def wait_stored(self) -> None:
        """Return once every change applied so far is in the store: callers that come while a
        write is under way share the next one (one commit for all of them)."""
        wanted = self._changes
        while self._stored < wanted:
            await self.write_pending(unless_stored=wanted)

    async def write_pending(self, *, unless_stored: int | None = None) -> None:
        """Write every change not yet in the store (changed jobs, then pruned ones); nothing
        when the first ``unless_stored`` changes already are (a write that waited for the
        lock may find its work done)."""
        async with self._write_lock:
            if unless_stored is not None and self._stored >= unless_stored:
                return
            through = self._changes
            dirty, self._dirty = self._dirty, {}
            deleted, self._deleted = self._deleted, set()
            changed = [(self._jobs[key], at) for key, at in dirty.items() if key in self._jobs]
            try:
                if changed:
                    await self._store.save(changed)
                if deleted:
                    await self._store.delete(sorted(deleted))
            except BaseException:
                for key, at in dirty.items():  # newer changes made meanwhile stay as they are
                    self._dirty.setdefault(key, at)
                self._deleted |= deleted - self._jobs.keys()
                raise
            self._stored = through

    async def _write_loop(self) -> None:
        """Every ``write_interval`` s while there are changes to write or gaps to watch; with
        none, it waits for the next without a timer."""
        while True:
            if not (self._dirty or self._deleted or self._gap_since):
                self._work.clear()
                await self._work.wait()
            await self._clock.sleep(self._write_interval)
            self._skip_stale_gaps()
            if self._dirty or self._deleted:
                await self.write_pending()

    async def _write_last(self) -> None:
        try:
            await self.write_pending()
        except Exception:
            log.exception("jobs: the last job changes could not be written")

    async def _load_once(self) -> None:
        if self._loaded:
            return
        stored = {job.id: job for job in await self._store.load()}
        left = await self._left_ends()
        ended = settle(stored, left.ends)
        at = self._clock.wall()
        marked = 0
        # Oldest first, so pushes arrive in creation order.
        for job in sorted({**stored, **ended}.values(), key=_age):
            if job.id in self._jobs or job.id in self._forgotten:
                continue  # reported again by this run: memory is newer
            # A member's job is that member's to finish; its link brings the news.
            after = job if self._mirrored(job) else interrupted(job, at)
            marked += after is not job
            self._commit(after, persist=after is not stored.get(job.id))
        self._loaded = True
        if left.files:
            await self.write_pending()  # the journal goes only once what it said is stored
            await asyncio.to_thread(left.remove)
        log.info(
            "jobs of node %s: %d stored jobs, %d ended by the journal, %d marked interrupted",
            self.node_id,
            len(stored),
            len(ended),
            marked,
        )

    async def _left_ends(self) -> LeftEnds:
        if self._journal is None:
            return LeftEnds([], [], [])
        return await asyncio.to_thread(read_left, self._journal)

    # State -----------------------------------------------------------------------------------

    def _commit(self, job: Job, *, persist: bool = True) -> None:
        new = job.id not in self._jobs
        self._jobs[job.id] = job
        if persist:
            self._dirty[job.id] = self._clock.wall()
            self._deleted.discard(job.id)
            self._changes += 1
            self._work.set()
        base = relay_base(job.id)
        if base is not None:
            self._relays.setdefault(base, set()).add(job.id)
        if self._visible(job.id):
            self._events.publish(partial(_upsert, job))
        if new:
            for relay in sorted(self._relays.get(job.id, ())):  # now shown as this job
                self._events.publish(partial(_remove, JobKey(relay)))
        if job.state in TERMINAL:
            self._open.discard(job.id)
            self._waiting.pop(job.id, None)
            self._gap_since.pop(job.id, None)
            self._prune()
        else:
            self._open.add(job.id)

    def _hold(self, job: Job, waiting: list[Step]) -> None:
        by_seq = {step.seq: step for step in waiting if step.seq > job.seq}
        if job.state in TERMINAL or not by_seq:
            self._waiting.pop(job.id, None)
            self._gap_since.pop(job.id, None)
            return
        self._waiting[job.id] = [by_seq[seq] for seq in sorted(by_seq)]
        self._gap_since.setdefault(job.id, self._clock.monotonic())
        self._work.set()
        if len(by_seq) > MAX_WAITING:
            self._gap_since[job.id] = float("-inf")

    def _skip_stale_gaps(self) -> None:
        now = self._clock.monotonic()
        for key, since in list(self._gap_since.items()):
            if now - since < self._gap_timeout:
                continue
            job = self._jobs[key]
            waiting = self._waiting.pop(key, [])
            del self._gap_since[key]
            log.warning(
                "job %s: events %d-%d never came; applying the %d after them",
                key,
                job.seq + 1,
                waiting[0].seq - 1,
                len(waiting),
            )
            after = job
            for step in waiting:
                after = apply(after, step)
            if after != job:
                self._commit(after)

    def _prune(self) -> None:
        excess = len(self._jobs) - len(self._open) - self._store.keep_finished
        if excess <= 0:
            return
        finished = (job for job in self._jobs.values() if job.state in TERMINAL)
        for job in heapq.nsmallest(excess, finished, key=_age):
            self._forget(job.id)
        self._trim_forgotten()

    def _forget(self, key: JobKey) -> None:
        visible = self._visible(key)
        del self._jobs[key]
        self._dirty.pop(key, None)
        self._deleted.add(key)
        self._work.set()
        self._forgotten[key] = None
        self._changes += 1
        self._open.discard(key)
        self._waiting.pop(key, None)
        self._gap_since.pop(key, None)
        base = relay_base(key)
        if base is not None:
            relays = self._relays.get(base, set())
            relays.discard(key)
            if not relays:
                self._relays.pop(base, None)
        if visible:
            self._events.publish(partial(_remove, key))
        for relay in sorted(self._relays.get(key, ())):  # shown on their own again
            self._events.publish(partial(_upsert, self._jobs[relay]))

    def _visible(self, key: str) -> bool:
        base = relay_base(key)
        return base is None or base not in self._jobs

    def _mirrored(self, job: Job) -> bool:
        """Another member's own record of a job it received (not one served here)."""
        return job.origin != self.node_id and relay_base(job.id) is None

    def _trim_forgotten(self) -> None:
        while len(self._forgotten) > self._store.keep_finished:
            del self._forgotten[next(iter(self._forgotten))]


class _Stopped(Exception):
    """Leaves the task group when ``stop()`` was called."""


def relay_base(key: str) -> str | None:
    """The member's job key of a job served here for it (``<key>@<attempt>``), else None."""
    base, at, attempt = key.rpartition("@")
    return base if at and attempt.isdigit() else None


MAX_FIELD_CHARS = 4096


def _mirror_problem(member: NodeId, record: JobRecord) -> str | None:
    if record.origin != member:
        return f"its origin is {record.origin}, not the member that sent it"
    if not record.key.startswith(f"{member}/") or relay_base(record.key) is not None:
        return "its key is not one of the member's own"
    if record.seq < 0 or record.attempt < 0:
        return "negative seq or attempt"
    if (record.chunks or 0) < 0 or (record.tokens or 0) < 0:
        return "negative chunks or tokens"
    texts = (
        *(record.key, record.model, record.engine, record.path, record.error or ""),
        *(record.client or "", record.client_address or "", record.note or ""),
    )
    if any(len(text) > MAX_FIELD_CHARS for text in texts):
        return "a field is too long"
    return None


def from_record(record: JobRecord) -> Job:
    """A job from its wire form (another member's record)."""
    return Job(
        id=record.key,
        engine=record.engine,
        model=record.model,
        origin=record.origin,
        created_at=record.created_at,
        state=record.state,
        attempt=record.attempt,
        target=record.target,
        serving=record.serving,
        started_at=record.started_at,
        completed_at=record.completed_at,
        error=record.error,
        seq=record.seq,
        run_id=record.run_id,
        path=record.path,
        client=record.client,
        client_address=record.client_address,
        first_token_at=record.first_token_at,
        chunks=record.chunks,
        tokens=record.tokens,
        note=record.note,
    )


def to_record(job: Job) -> JobRecord:
    """The wire form of a job."""
    return JobRecord(
        key=job.id,
        engine=job.engine,
        model=job.model,
        origin=job.origin,
        run_id=job.run_id,
        state=job.state,
        created_at=job.created_at,
        seq=job.seq,
        attempt=job.attempt,
        path=job.path,
        target=job.target,
        serving=job.serving,
        started_at=job.started_at,
        completed_at=job.completed_at,
        error=job.error,
        client=job.client,
        client_address=job.client_address,
        first_token_at=job.first_token_at,
        chunks=job.chunks,
        tokens=job.tokens,
        note=job.note,
    )


def _age(job: Job) -> tuple[float, str]:
    return job.created_at, job.id


def _upsert(job: Job, seq: int) -> JobsEvent:
    return JobUpserted(seq=seq, key=job.id, job=to_record(job))


def _remove(key: JobKey, seq: int) -> JobsEvent:
    return JobRemoved(seq=seq, key=key)
