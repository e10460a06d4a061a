"""Keeps ``NodesModel`` equal to the discovery store, plus this node's own details."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.models.nodes import NodesModel
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.base import EngineName, NodeId

log = logging.getLogger(__name__)


class NodesController(Controller):
    """Shows the discovery store's nodes as row changes (history kept through a snapshot) and
    this node's engines from the engines store; re-reads ``nodeinfo:get`` whenever this node's
    entry or telemetry changes, because the directory carries only summed figures, not each
    GPU or the OS. Clears the model when the session ends. Owns the ``nodeinfo:get`` read."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: NodesModel,
        discovery: DiscoveryStore,
        engines: EnginesStore,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.discovery = discovery
        self.engines = engines
        self._info_read: asyncio.Task[None] | None = None
        discovery.reset.connect(self._on_discovery_reset)
        discovery.cleared.connect(self._on_discovery_cleared)
        discovery.node_changed.connect(self._on_discovery_node_changed)
        discovery.telemetry_changed.connect(self._on_discovery_telemetry_changed)
        discovery.node_removed.connect(self._on_discovery_node_removed)
        engines.reset.connect(self._on_engines_reset)
        engines.engine_changed.connect(self._on_engines_engine_changed)

    # Connection ------------------------------------------------------------------------------

    def _on_connection_session_ready(self) -> None:
        self._read_self_info()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None and self._info_read is not None:
            self._info_read.cancel()

    # Discovery -------------------------------------------------------------------------------

    def _on_discovery_reset(self) -> None:
        self.model.load(self.discovery.nodes.values())

    def _on_discovery_cleared(self) -> None:
        self.model.clear()

    def _on_discovery_node_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None:
            self.model.upsert(node)
            self._reread_if_self(node_id)

    def _on_discovery_telemetry_changed(self, node_id: NodeId) -> None:
        node = self.discovery.node(node_id)
        if node is not None:
            self.model.apply_telemetry(node_id, node.telemetry, node.last_seen)
            self._reread_if_self(node_id)

    def _on_discovery_node_removed(self, node_id: NodeId) -> None:
        self.model.remove(node_id)

    def _reread_if_self(self, node_id: NodeId) -> None:
        if node_id == self.discovery.self_id:
            self._read_self_info()

    # This node -------------------------------------------------------------------------------

    def _on_engines_reset(self) -> None:
        self.model.set_self_engines(list(self.engines.statuses.values()))

    def _on_engines_engine_changed(self, engine: EngineName) -> None:
        status = self.engines.status(engine)
        if status is not None:
            self.model.update_self_engine(status)

    def _read_self_info(self) -> None:
        """Read ``nodeinfo:get`` unless a read is already under way (the next push catches up)."""
        if self._info_read is not None and not self._info_read.done():
            return
        # None for a discovery signal delivered while no loop runs (app exit)
        self._info_read = self._tasks.spawn_if_running(self._fetch_self_info(), name="nodeinfo")

    async def _fetch_self_info(self) -> None:
        try:
            info = await self.connection.call(methods.NODEINFO_GET)
        except RpcError as exc:
            log.debug("nodeinfo:get failed: %s", exc)
            return
        self.model.set_self_info(info)
