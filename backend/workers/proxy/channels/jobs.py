"""Numbered job events, sent to the broker in ``proxy:jobs`` notifications.

Each inference request is a job. Its events carry ``seq`` from 1, in the order they happen
in this process; the broker applies them in that order whatever order they arrive in. Events
are sent in batches, at most ``FLUSH_S`` after they happen, so a request's events (and a busy
door's) reach the broker as one notification instead of one each; a job's end is never held
back: it goes at once, with every event that waited, and the relay ends a job before the
client's last byte (research G4: a client that saw its answer complete has a completed job,
even if this process is killed the next instant). A completed job's last byte also waits until
the broker has that end in its store (``wait_stored``: at most ``STORED_WAIT_S``, then it goes
anyway), so a broker killed the next instant does not lose it either.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from backend.protocol import errors
from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind

# Hands the broker events in the order they happened (one notification).
Notify = Callable[[list[JobEvent]], None]
# Returns once the broker has stored every event handed to it before the call.
Stored = Callable[[], Awaitable[None]]

log = logging.getLogger(__name__)

# How long an event may wait for others to share its write to the broker; a job's last
# event goes at once (before ``send`` returns), with every event still waiting.
FLUSH_S = 0.05
_FINAL = frozenset({"completed", "errored"})
# The longest a completed answer's last byte waits for the broker's store: a broker that hangs
# must not hold clients' answers (its store is then no worse off than without the wait).
STORED_WAIT_S = 1.0


class JobLog:
    """Mints job keys for this proxy run and sends their events."""

    def __init__(
        self,
        notify: Notify,
        *,
        run_id: str | None = None,
        flush_s: float = 0.0,
        stored: Stored | None = None,
    ) -> None:
        self._notify = notify
        self._stored = stored
        self.run_id = run_id or secrets.token_hex(4)
        self._numbers = itertools.count(1)
        self._flush_s = flush_s
        self._batch: list[JobEvent] = []
        self._flush_due: asyncio.TimerHandle | None = None

    def new(
        self,
        *,
        origin: NodeId,
        engine: EngineName,
        model: str,
        path: str,
        key: JobKey | None = None,
        resumed: tuple[int, float] | None = None,
        client: tuple[str | None, str | None] = (None, None),
    ) -> Job:
        """A job for a request received here (``key`` given: a peer's job served here, or
        one a killed worker left, which goes on after its last event and keeps its creation
        time: ``resumed``)."""
        # A job served for a member is the member's to store before its client's last byte.
        ours = key is None or resumed is not None
        key = key or JobKey(f"{origin}/{self.run_id}/{next(self._numbers)}")
        seq, created_at = resumed if resumed is not None else (0, time.time())
        return Job(
            self,
            key=key,
            stored_before_end=ours,
            origin=origin,
            engine=engine,
            model=model,
            path=path,
            seq=seq,
            created_at=created_at,
            client=client,
        )

    def send(self, event: JobEvent) -> None:
        """Hand one event to the broker: within ``flush_s`` (the worker's ``FLUSH_S``) in a
        batch; a job's end, or any event when no loop runs, at once with what waited."""
        self._batch.append(event)
        if self._flush_s <= 0 or event.kind in _FINAL:
            self.flush()
            return
        if self._flush_due is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_due = loop.call_later(self._flush_s, self._due)

    def _due(self) -> None:
        self._flush_due = None
        self.flush()

    async def wait_stored(self) -> None:
        """Wait until the broker has stored every event sent so far; an error or no answer
        within its bound (the caller's ``stored`` sets it) is not waited out."""
        if self._stored is None:
            return
        try:
            await self._stored()
        except errors.RpcError as exc:
            log.debug("job events not confirmed stored: %s", exc)

    def flush(self) -> None:
        """Send every event that waits, in order. (A timer already set stays: it then finds
        nothing or what came since; one timer per ``flush_s`` at most, not one per job.)"""
        batch, self._batch = self._batch, []
        if batch:
            self._notify(batch)


class Job:
    """One request's events; ``attempt`` is the dispatch the next events belong to."""

    def __init__(
        self,
        log: JobLog,
        *,
        key: JobKey,
        origin: NodeId,
        engine: EngineName,
        model: str,
        path: str,
        seq: int = 0,
        created_at: float | None = None,
        stored_before_end: bool = False,
        client: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self._log = log
        self.stored_before_end = stored_before_end
        self.key = key
        self.origin = origin
        self.engine = engine
        self.model = model
        self.path = path
        self.created_at = time.time() if created_at is None else created_at
        # Who asked (a LAN key's name or ``loopback``) and from where; None for a member's job.
        self.client, self.client_address = client
        self.attempt = 0
        self.finished = False
        self.outcome: JobEventKind | None = None  # completed or errored, once finished
        self._seq = seq
        self._started_attempt = -1

    @property
    def seq(self) -> int:
        """The number of the last event sent."""
        return self._seq

    def submitted(self, attempt: int, target: NodeId | None) -> None:
        """Attempt ``attempt`` goes to ``target`` (None: waiting for the next round)."""
        self.attempt = attempt
        self._emit("submitted", target=target)

    def started(self, node: NodeId, attempt: int | None = None) -> None:
        """The engine on ``node`` started the request (once per attempt)."""
        attempt = self.attempt if attempt is None else attempt
        if attempt != self.attempt or self._started_attempt == attempt:
            return
        self._started_attempt = attempt
        self._emit("started", node=node)

    async def wait_stored(self) -> None:
        """Before a completed answer's last byte: wait until the broker stored its end (not for
        a job served for a member, nor one that failed)."""
        if self.outcome == "completed" and self.stored_before_end:
            await self._log.wait_stored()

    def completed(self) -> None:
        """The response ended with the engine's final marker."""
        self._finish("completed")

    def failed(self, error: str) -> None:
        """The job ended without a complete response."""
        self._finish("errored", error=error)

    def cancelled(self, error: str) -> None:
        """The client went away (or stopped reading)."""
        self._finish("errored", error=error, cancelled=True)

    def _finish(
        self, kind: JobEventKind, *, error: str | None = None, cancelled: bool = False
    ) -> None:
        if self.finished:
            return
        self.finished = True
        self.outcome = kind
        self._emit(kind, error=error, cancelled=cancelled)

    def _emit(
        self,
        kind: JobEventKind,
        *,
        target: NodeId | None = None,
        node: NodeId | None = None,
        error: str | None = None,
        cancelled: bool = False,
    ) -> None:
        self._seq += 1
        self._log.send(
            JobEvent(
                key=self.key,
                seq=self._seq,
                kind=kind,
                attempt=self.attempt,
                at=time.time(),
                engine=self.engine,
                model=self.model,
                origin=self.origin,
                run_id=self._log.run_id,
                created_at=self.created_at,
                path=self.path,
                client=self.client,
                client_address=self.client_address,
                target=target,
                node=node,
                error=error,
                cancelled=cancelled,
            )
        )
