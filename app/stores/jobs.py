"""The jobs this node's front doors saw (``jobs:subscribe``), shared by the Jobs page and
the tray's running count."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.base import StreamStore
from backend.protocol import methods
from backend.protocol.types.base import JobKey
from backend.protocol.types.jobs import (
    JobRecord,
    JobRemoved,
    JobsEvent,
    JobsQuery,
    JobsSnapshot,
    JobUpserted,
)

# The most ``jobs:subscribe`` returns; the broker keeps the 1000 newest finished jobs.
HISTORY_LIMIT = 1000


class JobsStore(StreamStore[JobsQuery, JobsSnapshot, JobsEvent]):
    """Jobs by key, at most ``limit`` from the snapshot (newest first) plus every later one.
    ``job_changed`` names a job that appeared or changed, ``job_removed`` one that left the
    history; ``reset`` after every snapshot."""

    job_changed = Signal(str)  # JobKey
    job_removed = Signal(str)  # JobKey

    def __init__(
        self,
        connection: BrokerConnection,
        parent: QObject | None = None,
        *,
        limit: int = HISTORY_LIMIT,
    ) -> None:
        query = JobsQuery(limit=limit)
        super().__init__(connection, methods.JOBS_SUBSCRIBE, methods.JOBS_EVENT, query, parent)
        self._jobs: dict[JobKey, JobRecord] = {}

    @property
    def jobs(self) -> Mapping[JobKey, JobRecord]:
        """Every known job (read-only), newest first as far as the snapshot goes."""
        return self._jobs

    def job(self, key: JobKey) -> JobRecord | None:
        """One job, if known."""
        return self._jobs.get(key)

    def _load(self, snapshot: JobsSnapshot) -> None:
        self._jobs = {job.key: job for job in snapshot.jobs}

    def _apply(self, event: JobsEvent) -> None:
        match event:
            case JobUpserted(key=key, job=job):
                self._jobs[key] = job
                self.job_changed.emit(key)
            case JobRemoved(key=key):
                if self._jobs.pop(key, None) is not None:
                    self.job_removed.emit(key)

    def _forget(self) -> None:
        self._jobs = {}
