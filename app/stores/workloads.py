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
    Workload,
    WorkloadRemoved,
    WorkloadsEvent,
    WorkloadsQuery,
    WorkloadsSnapshot,
    WorkloadUpserted,
)

# The most ``jobs:subscribe`` returns; the broker keeps the 1000 newest finished jobs.
HISTORY_LIMIT = 1000


class WorkloadsStore(StreamStore[WorkloadsQuery, WorkloadsSnapshot, WorkloadsEvent]):
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
        query = WorkloadsQuery(limit=limit)
        super().__init__(
            connection, methods.WORKLOADS_SUBSCRIBE, methods.WORKLOADS_EVENT, query, parent
        )
        self._jobs: dict[JobKey, Workload] = {}

    @property
    def jobs(self) -> Mapping[JobKey, Workload]:
        """Every known job (read-only), newest first as far as the snapshot goes."""
        return self._jobs

    def job(self, key: JobKey) -> Workload | None:
        """One job, if known."""
        return self._jobs.get(key)

    def _load(self, snapshot: WorkloadsSnapshot) -> None:
        self._jobs = {job.key: job for job in snapshot.workloads}

    def _apply(self, event: WorkloadsEvent) -> None:
        match event:
            case WorkloadUpserted(key=key, workload=job):
                self._jobs[key] = job
                self.job_changed.emit(key)
            case WorkloadRemoved(key=key):
                if self._jobs.pop(key, None) is not None:
                    self.job_removed.emit(key)

    def _forget(self) -> None:
        self._jobs = {}
