"""Keeps ``JobsModel`` equal to the jobs store (every member's jobs) and the names of the
nodes its jobs mention (from the discovery store, and the cluster's members from the engines
store); clears the history of finished jobs on request and reads one job's details."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.models.jobs import JobsModel
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from app.stores.jobs import JobsStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import JobKey, NodeId
from backend.protocol.types.jobs import JobDetails, JobRef
from backend.protocol.types.nodes import DiscoveredNode


class JobsController(Controller):
    """Shows the jobs store's jobs: the session's first snapshot as one reset, a later one
    (after a gap) as row changes so the selection stays, each event as a row change. Node names
    follow the discovery store's snapshots and changed nodes (names of nodes that left stay).
    The other members (names and the list the node filter offers) follow ``engines``, when
    given. Owns the clear-history command and the reading of a job's details."""

    details_loaded = Signal(object)  # JobDetails
    details_failed = Signal(str, str)  # the job's key, a sentence saying why

    def __init__(
        self,
        connection: BrokerConnection,
        model: JobsModel,
        jobs: JobsStore,
        discovery: DiscoveryStore,
        parent: QObject | None = None,
        *,
        engines: EnginesStore | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.jobs = jobs
        self.discovery = discovery
        self.engines = engines
        self._session_shown = False  # whether this session's first jobs snapshot is shown
        jobs.reset.connect(self._on_jobs_reset)
        jobs.cleared.connect(self._on_jobs_cleared)
        jobs.job_changed.connect(self._on_jobs_job_changed)
        jobs.job_removed.connect(self._on_jobs_job_removed)
        discovery.reset.connect(self._on_discovery_reset)
        discovery.node_changed.connect(self._on_discovery_node_changed)
        if engines is not None:
            for signal in (engines.reset, engines.cleared, engines.member_changed):
                signal.connect(self._on_engines_members_changed)

    def clear_history(self) -> None:
        """Ask the broker to delete the finished jobs; their removals come back as events."""
        call = self.connection.call(methods.JOBS_CLEAR)
        self.run_command(call, what="clear the jobs history")

    def load_details(self, key: str) -> None:
        """Read one job and its timeline: ``details_loaded``, or ``details_failed`` with why."""
        self._tasks.spawn(self._load_details(JobKey(key)), name="read a job's details")

    async def _load_details(self, key: JobKey) -> None:
        try:
            details: JobDetails = await self.connection.call(methods.JOBS_GET, JobRef(key=key))
        except RpcError as exc:
            self.details_failed.emit(key, f"The timeline could not be read: {exc}")
            return
        self.details_loaded.emit(details)

    def _on_jobs_reset(self) -> None:
        jobs = self.jobs.jobs.values()
        if self._session_shown:  # after a gap the rows shown are comparable: keep the selection
            self.model.sync(jobs)
        else:
            self.model.reset(jobs)
            self._session_shown = True

    def _on_jobs_cleared(self) -> None:
        self._session_shown = False
        self.model.clear()

    def _on_jobs_job_changed(self, key: JobKey) -> None:
        job = self.jobs.job(key)
        if job is not None:
            self.model.upsert(job)

    def _on_jobs_job_removed(self, key: JobKey) -> None:
        self.model.remove(key)

    def _on_discovery_reset(self) -> None:
        self._name_nodes(self.discovery.nodes.values())

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None:
            self._name_nodes([node])

    def _name_nodes(self, nodes: Iterable[DiscoveredNode]) -> None:
        shown = list(nodes)
        own = next((node.node_id for node in shown if is_self(node)), None)
        self.model.set_node_names({node.node_id: node.name for node in shown}, own)

    def _on_engines_members_changed(self, *_args: object) -> None:
        if self.engines is not None:
            members = self.engines.members.values()
            self.model.set_members({member.node_id: member.name for member in members})
