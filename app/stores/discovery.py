"""The broker's node directory (``discovery:subscribe``), shared by every controller that shows
nodes: the Overview cards, other nodes' engines and models, the names on the Jobs page."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.base import StreamStore
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import (
    DiscoveredNode,
    DiscoveryEvent,
    DiscoverySnapshot,
    NodeJoined,
    NodeLeft,
    NodeTelemetryChanged,
    NodeUpdated,
)


def is_self(node: DiscoveredNode) -> bool:
    """Whether the entry is this node."""
    return "self" in node.sources


class DiscoveryStore(StreamStore[NoParams, DiscoverySnapshot, DiscoveryEvent]):
    """Nodes by id, in the broker's order. ``node_changed`` for a node that joined or changed,
    ``telemetry_changed`` when only its figures and last-seen time did, ``node_removed`` when
    it left; ``reset`` after every snapshot."""

    node_changed = Signal(str)  # NodeId
    telemetry_changed = Signal(str)  # NodeId
    node_removed = Signal(str)  # NodeId

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(
            connection, methods.DISCOVERY_SUBSCRIBE, methods.DISCOVERY_EVENT, None, parent
        )
        self._nodes: dict[NodeId, DiscoveredNode] = {}

    @property
    def nodes(self) -> Mapping[NodeId, DiscoveredNode]:
        """Every known node (read-only)."""
        return self._nodes

    def node(self, node_id: NodeId) -> DiscoveredNode | None:
        """One node, if known."""
        return self._nodes.get(node_id)

    @property
    def self_id(self) -> NodeId | None:
        """This node's id, once the directory lists it."""
        return next((node_id for node_id, node in self._nodes.items() if is_self(node)), None)

    def _load(self, snapshot: DiscoverySnapshot) -> None:
        self._nodes = {node.node_id: node for node in snapshot.nodes}

    def _apply(self, event: DiscoveryEvent) -> None:
        match event:
            case NodeJoined() | NodeUpdated():
                self._nodes[event.node_id] = event.node
                self.node_changed.emit(event.node_id)
            case NodeTelemetryChanged():
                node = self._nodes.get(event.node_id)
                if node is not None:
                    self._nodes[event.node_id] = msgspec.structs.replace(
                        node, telemetry=event.telemetry, last_seen=event.last_seen
                    )
                    self.telemetry_changed.emit(event.node_id)
            case NodeLeft():
                if self._nodes.pop(event.node_id, None) is not None:
                    self.node_removed.emit(event.node_id)

    def _forget(self) -> None:
        self._nodes = {}
