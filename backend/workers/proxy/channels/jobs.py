"""Numbered job events, sent to the broker in ``proxy:jobs`` notifications.

Each inference request is a job. Its events carry ``seq`` from 1, in the order they happen
in this process; the broker applies them in that order whatever order they arrive in. Events
are sent in batches, at most ``FLUSH_S`` after they happen, so a request's events (and a busy
door's) reach the broker as one notification instead of one each.

A job's start and end are written to the journal at once (``journal.py``: one ``os.write``
each, no wait), and the relay ends a job before the client's last byte: research G4 (a client
that saw its answer complete has a completed job) holds by the journal, whichever process is
killed the next instant. A broker reads the journal of a worker that exited
(``JobsComponent.fail_unfinished``) and, when it starts, the journals earlier runs left. So the
end itself need not reach the broker before the client's last byte, and does not: it goes
with the batch already waiting, or when none waits, on the loop's next turn, after the byte (a
notification sent first put a write, and a frame for the broker to decode, before the byte of
every answer where answers end one at a time, as llama-server's do). Without a journal the end
goes at once.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable

from backend.protocol.types.base import EngineName, JobKey, NodeId
from backend.protocol.types.jobs import JobEvent, JobEventKind
from backend.workers.proxy.channels.journal import JobJournal

# Hands the broker events in the order they happened (one notification).
Notify = Callable[[list[JobEvent]], None]

# How long an event may wait for others to share its write to the broker; a job's last
# event goes at once (before ``send`` returns), with every event still waiting.
FLUSH_S = 0.05
_FINAL = frozenset({"completed", "errored"})


class JobLog:
    """Mints job keys for this proxy run and sends their events."""

    def __init__(
        self,
        notify: Notify,
        *,
        run_id: str | None = None,
        flush_s: float = 0.0,
        journal: JobJournal | None = None,
    ) -> None:
        self._notify = notify
        self.journal = journal
        self.run_id = run_id or secrets.token_hex(4)
        self._numbers = itertools.count(1)
        self._flush_s = flush_s
        self._batch: list[JobEvent] = []
        self._flush_due: asyncio.TimerHandle | None = None
        self._soon = False  # a flush on the loop's next turn is set (a job ended, none waited)

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
        key = key or JobKey(f"{origin}/{self.run_id}/{next(self._numbers)}")
        seq, created_at = resumed if resumed is not None else (0, time.time())
        return Job(
            self,
            key=key,
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
        batch. A job's end is journaled now and goes with the batch that waits, or on the
        loop's next turn when none does; without a journal (or with no loop) it goes at once,
        with what waited."""
        self._batch.append(event)
        if event.kind == "started" and self.journal is not None:
            self.journal.append(event)  # what a broker reads if this worker dies before telling
        if event.kind in _FINAL:
            if self.journal is None or self._flush_s <= 0:
                if self.journal is not None:
                    self.journal.append(event)
                self.flush()
                return
            self.journal.append(event)
            if self._flush_due is None and not self._soon:
                self._flush_soon()
            return
        if self._flush_s <= 0:
            self.flush()
            return
        if self._flush_due is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_due = loop.call_later(self._flush_s, self._due)

    def _flush_soon(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._soon = True
        loop.call_soon(self._due_soon)

    def _due(self) -> None:
        self._flush_due = None
        self.flush()

    def _due_soon(self) -> None:
        self._soon = False
        self.flush()

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
        client: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self._log = log
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
        # The serving attempt's answer as relayed: when its first chunk went out, how many
        # chunks it had, and whether those were a stream's (a whole body's chunks count nothing).
        self.first_chunk_at: float | None = None
        # When an attempt committed (its first body byte came; Unix time): no other follows.
        self.committed_at: float | None = None
        self.chunks = 0
        self.streamed = False

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

    def refused(self, message: str) -> None:
        """The door answered the request itself, sending it nowhere: queued, then failed."""
        self._emit("submitted")
        self._finish("errored", error=message)

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
        self._emit(kind, error=error, cancelled=cancelled, final=True)

    def _emit(
        self,
        kind: JobEventKind,
        *,
        target: NodeId | None = None,
        node: NodeId | None = None,
        error: str | None = None,
        cancelled: bool = False,
        final: bool = False,
    ) -> None:
        self._seq += 1
        chunks = self.chunks if final and self.streamed and self.chunks else None
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
                first_token_at=self.first_chunk_at if final else None,
                chunks=chunks,
            )
        )
