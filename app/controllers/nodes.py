"""Keeps ``NodesModel`` equal to the broker's node directory, plus this node's own details."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode
from app.controllers.subscription import NumberedSubscription
from app.models.nodes import NodesModel
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import DiscoveryEvent, DiscoverySnapshot, EngineStatus, NodeInfo

log = logging.getLogger(__name__)


class NodesController(Controller):
    """Subscribes to ``discovery:*`` on every new session and applies ``discovery:event`` in
    ``seq`` order (a gap subscribes again); follows this node's engines (``engine:status``, then
    ``engine:state-changed``) and re-reads ``nodeinfo:get`` whenever this node's telemetry is
    pushed, because the directory carries only summed figures, not each GPU or the OS.
    Clears the model when the session ends. Owns the subscription and read tasks."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: NodesModel,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._discovery = NumberedSubscription(
            self._tasks,
            connection,
            methods.DISCOVERY_SUBSCRIBE,
            DiscoverySnapshot,
            DiscoveryEvent,
            on_snapshot=self._load_nodes,
            on_event=self._apply_node_event,
        )
        self._self_id: str | None = None
        self._info_read: asyncio.Task[None] | None = None
        self._engines_read: asyncio.Task[None] | None = None
        # Engines pushed while engine:status was being read: newer than the read's answer.
        self._engines_pushed: dict[str, EngineStatus] = {}

    # Connection ------------------------------------------------------------------------------

    def _on_connection_session_ready(self) -> None:
        self._discovery.start()
        self._engines_read = self._tasks.spawn(self._read_engines(), name="engine-status")
        self._read_self_info()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            for task in (self._info_read, self._engines_read):
                if task is not None:
                    task.cancel()
            self._discovery.reset()
            self._self_id = None
            self.model.clear()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.DISCOVERY_EVENT:
            self._discovery.feed(params)
        elif method == methods.ENGINE_STATE_CHANGED:
            status = decode(params, EngineStatus)
            if status is not None:
                self._engines_pushed[status.engine] = status
                self.model.update_self_engine(status)

    # Discovery -------------------------------------------------------------------------------

    def _load_nodes(self, snapshot: DiscoverySnapshot) -> None:
        self._self_id = next(
            (node.node_id for node in snapshot.nodes if "self" in node.sources), self._self_id
        )
        self.model.load(snapshot.nodes)

    def _apply_node_event(self, event: DiscoveryEvent) -> None:
        if event.event == "node_left":
            self.model.remove(event.node_id)
        elif event.event == "node_telemetry":
            self.model.apply_telemetry(event.node_id, event.telemetry, event.last_seen)
        elif event.node is not None:
            if "self" in event.node.sources:
                self._self_id = event.node.node_id
            self.model.upsert(event.node)
        if event.node_id == self._self_id and event.event != "node_left":
            self._read_self_info()

    # This node -------------------------------------------------------------------------------

    def _read_self_info(self) -> None:
        """Read ``nodeinfo:get`` unless a read is already under way (the next push catches up)."""
        if self._info_read is not None and not self._info_read.done():
            return
        self._info_read = self._tasks.spawn(self._fetch_self_info(), name="nodeinfo")

    async def _fetch_self_info(self) -> None:
        try:
            raw = await self.connection.call(methods.NODEINFO_GET)
        except RpcError as exc:
            log.debug("nodeinfo:get failed: %s", exc)
            return
        info = decode(raw, NodeInfo)
        if info is not None:
            self.model.set_self_info(info)

    async def _read_engines(self) -> None:
        self._engines_pushed = {}
        try:
            raw = await self.connection.call(methods.ENGINE_STATUS)
        except RpcError as exc:
            log.info("engine:status failed: %s", exc)
            return
        statuses = decode(raw, list[EngineStatus])
        if statuses is None:
            return
        pushed = self._engines_pushed
        self.model.set_self_engines([pushed.get(status.engine, status) for status in statuses])
