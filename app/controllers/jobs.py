"""Keeps ``JobsModel`` equal to the broker's jobs (a snapshot, then numbered events) and the
names of the nodes they mention; clears the history of finished jobs on request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode
from app.models.components import EventStep, next_event_step
from app.models.jobs import JobsModel
from app.tasks import TaskSet
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import (
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    WorkloadsEvent,
    WorkloadsSnapshot,
)

log = logging.getLogger(__name__)

# The most ``workloads:subscribe`` returns; the broker keeps the 1000 newest finished jobs.
HISTORY_LIMIT = 1000


class Numbered(Protocol):
    """An event of a numbered stream."""

    @property
    def seq(self) -> int:
        """One more than the previous event's."""
        ...


E = TypeVar("E", bound=Numbered)


class NumberedFeed(Generic[E]):
    """One subscription's bookkeeping: events that come before its snapshot wait for it, later
    ones apply in ``seq`` order, a gap reads the snapshot again. Owns the read task."""

    def __init__(
        self,
        name: str,
        tasks: TaskSet,
        read: Callable[[bool], Coroutine[Any, Any, int | None]],
        apply: Callable[[E], None],
    ) -> None:
        self._name = name
        self._tasks = tasks
        self._read = read  # reads and shows a snapshot (True: a new session); returns its seq
        self._apply = apply
        self.seq: int | None = None  # None while no snapshot is applied
        self._early: list[E] = []
        self._reading: asyncio.Task[None] | None = None

    def subscribe(self, *, fresh: bool) -> None:
        """Read a snapshot (again), then apply the events after it."""
        self.stop()
        self._reading = self._tasks.spawn(self._read_then_catch_up(fresh), name=self._name)

    def stop(self) -> None:
        """Forget the subscription (the session ended)."""
        if self._reading is not None:
            self._reading.cancel()
        self.seq = None
        self._early = []

    def offer(self, event: E) -> None:
        """An event arrived."""
        if self.seq is None:
            self._early.append(event)
            return
        step = next_event_step(self.seq, event.seq)
        if step is EventStep.APPLY:
            self.seq = event.seq
            self._apply(event)
        elif step is EventStep.GAP:
            log.info(
                "%s: gap after seq %d (got %d); reading again", self._name, self.seq, event.seq
            )
            self.subscribe(fresh=False)

    async def _read_then_catch_up(self, fresh: bool) -> None:
        seq = await self._read(fresh)
        if seq is None:
            return
        self.seq = seq
        early, self._early = self._early, []
        for event in sorted(early, key=lambda e: e.seq):
            self.offer(event)


class JobsController(Controller):
    """Subscribes to ``workloads:*`` on every new session and applies ``workloads:event`` in
    ``seq`` order; after a gap the fresh snapshot is applied as row changes. Node names come
    from ``discovery:subscribe`` and its ``node_joined``/``node_updated`` events. Owns the two
    subscription tasks."""

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
        self._limit = limit
        self._jobs = NumberedFeed[WorkloadsEvent](
            "jobs", self._tasks, self._read_jobs, self._apply_job_event
        )
        self._nodes = NumberedFeed[DiscoveryEvent](
            "job nodes", self._tasks, self._read_nodes, self._apply_node_event
        )

    def clear_history(self) -> None:
        """Ask the broker to delete the finished jobs; their removals come back as events."""
        call = self.connection.call(methods.WORKLOADS_CLEAR)
        self.run_command(call, what="clear the jobs history")

    def _on_connection_session_ready(self) -> None:
        self._jobs.subscribe(fresh=True)
        self._nodes.subscribe(fresh=True)

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._jobs.stop()
            self._nodes.stop()
            self.model.clear()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.WORKLOADS_EVENT:
            job_event = decode(params, WorkloadsEvent)
            if job_event is not None:
                self._jobs.offer(job_event)
        elif method == methods.DISCOVERY_EVENT:
            node_event = decode(params, DiscoveryEvent)
            if node_event is not None:
                self._nodes.offer(node_event)

    async def _read_jobs(self, fresh: bool) -> int | None:
        try:
            raw = await self.connection.call(methods.WORKLOADS_SUBSCRIBE, {"limit": self._limit})
        except RpcError as exc:
            log.info("workloads:subscribe failed: %s", exc)
            return None
        snapshot = decode(raw, WorkloadsSnapshot)
        if snapshot is None:
            return None
        if fresh:
            self.model.reset(snapshot.workloads)
        else:  # after a gap the rows shown are comparable: keep the selection and scroll
            self.model.sync(snapshot.workloads)
        return snapshot.seq

    def _apply_job_event(self, event: WorkloadsEvent) -> None:
        if event.event == "remove":
            self.model.remove(event.key)
        elif event.workload is not None:
            self.model.upsert(event.workload)

    async def _read_nodes(self, _fresh: bool) -> int | None:
        # Subscribed (not just discovery:get-nodes) so that new nodes and renames are pushed.
        try:
            raw = await self.connection.call(methods.DISCOVERY_SUBSCRIBE)
        except RpcError as exc:
            log.info("discovery:subscribe failed; jobs show node ids: %s", exc)
            return None
        snapshot = decode(raw, DiscoverySnapshot)
        if snapshot is None:
            return None
        self._name_nodes(snapshot.nodes)
        return snapshot.seq

    def _apply_node_event(self, event: DiscoveryEvent) -> None:
        if event.node is not None:
            self._name_nodes([event.node])

    def _name_nodes(self, nodes: list[DiscoveredNode]) -> None:
        own = next((node.node_id for node in nodes if "self" in node.sources), None)
        self.model.set_node_names({node.node_id: node.name for node in nodes}, own)
