"""Keeps ``JobsModel`` equal to the broker's jobs (a snapshot, then numbered events) and the
names of the nodes they mention; clears the history of finished jobs on request."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.controllers.subscription import NumberedSubscription
from app.models.jobs import JobsModel
from backend.protocol import methods
from backend.protocol.types import (
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    WorkloadsEvent,
    WorkloadsSnapshot,
)

# The most ``workloads:subscribe`` returns; the broker keeps the 1000 newest finished jobs.
HISTORY_LIMIT = 1000


class JobsController(Controller):
    """Subscribes to ``workloads:*`` on every new session and applies ``workloads:event`` in
    ``seq`` order; after a gap the fresh snapshot is applied as row changes. Node names come
    from ``discovery:subscribe`` and its ``node_joined``/``node_updated`` events. Owns the two
    subscriptions."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: JobsModel,
        parent: QObject | None = None,
        *,
        limit: int = HISTORY_LIMIT,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._jobs = NumberedSubscription(
            self._tasks,
            connection,
            methods.WORKLOADS_SUBSCRIBE,
            WorkloadsSnapshot,
            WorkloadsEvent,
            on_snapshot=self._show_jobs,
            on_event=self._apply_job_event,
            params={"limit": limit},
        )
        self._session_shown = False  # whether this session's first jobs snapshot is shown
        # Subscribed (not just discovery:get-nodes) so that new nodes and renames are pushed.
        self._nodes = NumberedSubscription(
            self._tasks,
            connection,
            methods.DISCOVERY_SUBSCRIBE,
            DiscoverySnapshot,
            DiscoveryEvent,
            on_snapshot=lambda snapshot: self._name_nodes(snapshot.nodes),
            on_event=self._apply_node_event,
        )

    def clear_history(self) -> None:
        """Ask the broker to delete the finished jobs; their removals come back as events."""
        call = self.connection.call(methods.WORKLOADS_CLEAR)
        self.run_command(call, what="clear the jobs history")

    def _on_connection_session_ready(self) -> None:
        self._session_shown = False
        self._jobs.start()
        self._nodes.start()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._jobs.reset()
            self._nodes.reset()
            self.model.clear()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.WORKLOADS_EVENT:
            self._jobs.feed(params)
        elif method == methods.DISCOVERY_EVENT:
            self._nodes.feed(params)

    def _show_jobs(self, snapshot: WorkloadsSnapshot) -> None:
        if self._session_shown:  # after a gap the rows shown are comparable: keep the selection
            self.model.sync(snapshot.workloads)
        else:
            self.model.reset(snapshot.workloads)
            self._session_shown = True

    def _apply_job_event(self, event: WorkloadsEvent) -> None:
        if event.event == "remove":
            self.model.remove(event.key)
        elif event.workload is not None:
            self.model.upsert(event.workload)

    def _apply_node_event(self, event: DiscoveryEvent) -> None:
        if event.node is not None:
            self._name_nodes([event.node])

    def _name_nodes(self, nodes: list[DiscoveredNode]) -> None:
        own = next((node.node_id for node in nodes if "self" in node.sources), None)
        self.model.set_node_names({node.node_id: node.name for node in nodes}, own)
