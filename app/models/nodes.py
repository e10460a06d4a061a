"""The node cards of the Overview page: one row per node, this node first, with live history."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import Any

import msgspec
from PySide6.QtCore import QAbstractListModel, QByteArray, QModelIndex, QObject, Qt

from app.models.keyed_table import ModelIndex
from backend.protocol.types.engines import EngineStatus
from backend.protocol.types.nodes import (
    DiscoveredNode,
    NodeGpu,
    NodeInfo,
    NodeKind,
    NodeTelemetry,
)

HISTORY_LENGTH = 150  # samples kept per node: 5 minutes at the 2 s telemetry interval
ENGINE_NAMES = {
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "llamacpp": "llama.cpp",
    "openai": "OpenAI-compatible server",
}
_NO_PARENT = QModelIndex()


class NodeRole(IntEnum):
    """The data roles a node card reads (``Qt.DisplayRole`` is the node's name)."""

    NODE_ID = Qt.ItemDataRole.UserRole + 1
    KIND = Qt.ItemDataRole.UserRole + 2
    IS_SELF = Qt.ItemDataRole.UserRole + 3
    REACHABLE = Qt.ItemDataRole.UserRole + 4
    OS = Qt.ItemDataRole.UserRole + 5
    CPU_PERCENT = Qt.ItemDataRole.UserRole + 6
    MEMORY_USED = Qt.ItemDataRole.UserRole + 7
    MEMORY_TOTAL = Qt.ItemDataRole.UserRole + 8
    GPUS = Qt.ItemDataRole.UserRole + 9
    ENGINES = Qt.ItemDataRole.UserRole + 10
    HISTORY = Qt.ItemDataRole.UserRole + 11
    CARD = Qt.ItemDataRole.UserRole + 12


class GpuLine(msgspec.Struct, frozen=True):
    """One GPU as a card shows it (for an older peer that lists none: its busiest GPU and summed
    VRAM, named "GPU"); a figure that could not be read is None."""

    name: str
    utilization_percent: float | None
    vram_used_bytes: int | None
    vram_total_bytes: int | None


class EngineLine(msgspec.Struct, frozen=True):
    """One engine on a node: its display name, state and the models it has loaded."""

    engine: str
    name: str
    state: str  # an EngineState, or "offline" when the node does not answer
    loaded: tuple[str, ...] = ()


class Sample(msgspec.Struct, frozen=True):
    """One telemetry reading for the charts; percentages, None when not measured."""

    at: float  # Unix time of the reading
    cpu_percent: float | None
    memory_percent: float | None
    gpu_percent: float | None
    vram_percent: float | None = None


class NodeCard(msgspec.Struct, frozen=True):
    """Everything one card shows (the history is kept beside it, see ``NodeRole.HISTORY``)."""

    node_id: str
    name: str
    kind: NodeKind
    is_self: bool
    reachable: bool
    addresses: tuple[str, ...] = ()
    endpoint: str | None = None  # where it answers: first address and node API or engine port
    version: str | None = None
    last_seen: float | None = None
    os: str | None = None
    cpu_name: str | None = None
    system: str | None = None  # the OS's name alone (``Linux``), for this node and members
    cpu_threads: int | None = None
    telemetry_valid: bool = False
    cpu_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    gpus: tuple[GpuLine, ...] = ()
    engines: tuple[EngineLine, ...] = ()


class SelfDetails(msgspec.Struct, frozen=True):
    """What only this node tells about itself: ``nodeinfo:get`` and its engines' states."""

    info: NodeInfo | None = None
    engines: tuple[EngineStatus, ...] = ()


def describe_os(info: NodeInfo) -> str | None:
    """``Linux 6.8.0 · x86_64`` from whatever parts the platform reported."""
    system = " ".join(part for part in (info.os.system, info.os.release) if part)
    parts = [part for part in (system, info.os.machine) if part]
    return " · ".join(parts) or None


def describe_cpu(info: NodeInfo) -> str | None:
    """``AMD Ryzen 9 7950X · 32 threads`` from whatever parts were read."""
    cores = f"{info.cpu.cores} threads" if info.cpu.cores else None
    parts = [part for part in (info.cpu.name, cores) if part]
    return " · ".join(parts) or None


def sample_of(telemetry: NodeTelemetry, at: float) -> Sample:
    """A chart sample from a telemetry reading taken at ``at``."""
    used, total = telemetry.memory_used_bytes, telemetry.memory_total_bytes
    memory = 100.0 * used / total if used is not None and total else None
    vram_used, vram_total = telemetry.vram_used_bytes, telemetry.vram_total_bytes
    vram = 100.0 * vram_used / vram_total if vram_used is not None and vram_total else None
    return Sample(at, telemetry.cpu_percent, memory, telemetry.gpu_percent, vram)


def _engine_name(engine: str, details: SelfDetails) -> str:
    for status in details.engines:
        if status.engine == engine:
            return status.display_name
    return ENGINE_NAMES.get(engine, engine)


def _engine_lines(node: DiscoveredNode, is_self: bool, details: SelfDetails) -> list[EngineLine]:
    def loaded(engine: str) -> tuple[str, ...]:
        models = node.engines.get(engine)
        return tuple(models.loaded or ()) if models is not None else ()

    if is_self and details.engines:
        return [
            EngineLine(status.engine, status.display_name, status.state, loaded(status.engine))
            for status in details.engines
            if status.installed or status.state != "not-installed"
        ]
    # A peer lists running engines only, so what it lists runs while it answers.
    state = "running" if node.reachable else "offline"
    return [
        EngineLine(engine, _engine_name(engine, details), state, loaded(engine))
        for engine in sorted(node.engines)
    ]


def _gpu_line(gpu: NodeGpu) -> GpuLine:
    name = gpu.name or f"{gpu.vendor.upper()} GPU"
    return GpuLine(name, gpu.utilization_percent, gpu.vram_used_bytes, gpu.vram_total_bytes)


def _gpu_lines(node: DiscoveredNode, info: NodeInfo | None) -> tuple[GpuLine, ...]:
    """Each GPU from the latest telemetry, else from this node's node-info, else (an older
    peer) one line of its busiest GPU and summed VRAM; none for a computer without a GPU."""
    telemetry = node.telemetry
    if telemetry is not None and telemetry.gpus:
        return tuple(_gpu_line(gpu) for gpu in telemetry.gpus)
    if info is not None:
        return tuple(_gpu_line(gpu) for gpu in info.gpus)
    if telemetry is None or (telemetry.gpu_percent is None and telemetry.vram_total_bytes is None):
        return ()
    return (
        GpuLine(
            "GPU", telemetry.gpu_percent, telemetry.vram_used_bytes, telemetry.vram_total_bytes
        ),
    )


def _endpoint(node: DiscoveredNode) -> str | None:
    if not node.addresses:
        return None
    port = node.ports.get("node") if node.kind == "pair" else next(iter(node.ports.values()), None)
    address = node.addresses[0]
    host = f"[{address}]" if ":" in address else address
    return host if port is None else f"{host}:{port}"


def build_card(node: DiscoveredNode, details: SelfDetails) -> NodeCard:
    """The card of ``node``; ``details`` apply only when it is this node."""
    is_self = "self" in node.sources
    info = details.info if is_self and details.info is not None else None
    if info is not None and info.node_id != node.node_id:
        info = None
    telemetry = node.telemetry
    return NodeCard(
        node_id=node.node_id,
        name=node.name,
        kind=node.kind,
        is_self=is_self,
        reachable=node.reachable,
        addresses=tuple(node.addresses),
        endpoint=_endpoint(node),
        version=node.version,
        last_seen=node.last_seen,
        os=describe_os(info) if info is not None else None,
        cpu_name=describe_cpu(info) if info is not None else None,
        system=node.system or (info.os.system if info is not None else None),
        cpu_threads=node.cpu_threads or (info.cpu.cores if info is not None else None),
        telemetry_valid=telemetry.valid if telemetry is not None else False,
        cpu_percent=telemetry.cpu_percent if telemetry is not None else None,
        memory_used_bytes=telemetry.memory_used_bytes if telemetry is not None else None,
        memory_total_bytes=telemetry.memory_total_bytes if telemetry is not None else None,
        gpus=_gpu_lines(node, info),
        engines=tuple(_engine_lines(node, is_self, details)),
    )


def sort_key(node: DiscoveredNode) -> tuple[bool, str, str]:
    """This node first, then by name (case-insensitive), then by id."""
    return ("self" not in node.sources, node.name.casefold(), node.node_id)


class NodesModel(QAbstractListModel):
    """Known nodes in display order, with a bounded telemetry history per node.

    Every change is row-level (insert, move, ``dataChanged``, remove); only ``clear`` resets.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nodes: list[DiscoveredNode] = []
        self._cards: list[NodeCard] = []
        self._history: dict[str, deque[Sample]] = {}
        self._details = SelfDetails()

    # Qt's list model contract ----------------------------------------------------------------

    def rowCount(self, parent: ModelIndex = _NO_PARENT) -> int:
        """Number of nodes (a flat list: valid parents have no children)."""
        return 0 if parent.isValid() else len(self._nodes)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """The node's name for display, its addresses as tooltip, or one ``NodeRole``."""
        if not index.isValid() or not 0 <= index.row() < len(self._cards):
            return None
        card = self._cards[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return card.name
        if role == Qt.ItemDataRole.ToolTipRole:
            return ", ".join(card.addresses) or None
        if role == NodeRole.HISTORY:
            return self.history(card.node_id)
        return _ROLE_VALUES[role](card) if role in _ROLE_VALUES else None

    def roleNames(self) -> dict[int, QByteArray]:
        """Role names, so the roles can be read by name."""
        names = dict(super().roleNames())
        for role in NodeRole:
            names[int(role)] = QByteArray(role.name.lower().encode())
        return names

    # Reading ---------------------------------------------------------------------------------

    def cards(self) -> list[NodeCard]:
        """Every card in display order (a copy)."""
        return list(self._cards)

    def position(self, node_id: str) -> int | None:
        """The row of ``node_id``, if shown."""
        for position, node in enumerate(self._nodes):
            if node.node_id == node_id:
                return position
        return None

    def history(self, node_id: str) -> tuple[Sample, ...]:
        """The node's recent samples, oldest first (at most ``HISTORY_LENGTH``)."""
        return tuple(self._history.get(node_id, ()))

    # Changes ---------------------------------------------------------------------------------

    def load(self, nodes: Iterable[DiscoveredNode]) -> None:
        """Make the list equal a snapshot with row-level changes; histories of kept nodes stay."""
        wanted = {node.node_id: node for node in nodes}
        for node_id in [node.node_id for node in self._nodes if node.node_id not in wanted]:
            self.remove(node_id)
        for node in wanted.values():
            self.upsert(node)

    def upsert(self, node: DiscoveredNode) -> None:
        """Add ``node`` at its sorted place, or update (and if renamed, move) its row."""
        appended = self._record(node.node_id, node.telemetry, node.last_seen)
        position = self.position(node.node_id)
        if position is None:
            self._insert(node)
        else:
            self._replace(position, node, force=appended)

    def apply_telemetry(
        self, node_id: str, telemetry: NodeTelemetry | None, last_seen: float | None
    ) -> None:
        """Only the figures (and ``last_seen``) of a node changed."""
        position = self.position(node_id)
        if position is None:
            return
        appended = self._record(node_id, telemetry, last_seen)
        node = msgspec.structs.replace(
            self._nodes[position], telemetry=telemetry, last_seen=last_seen
        )
        self._replace(position, node, force=appended)

    def remove(self, node_id: str) -> bool:
        """Remove the node's row and history; False when it was not shown."""
        position = self.position(node_id)
        if position is None:
            return False
        self.beginRemoveRows(_NO_PARENT, position, position)
        del self._nodes[position]
        del self._cards[position]
        self._history.pop(node_id, None)
        self.endRemoveRows()
        return True

    def set_self_info(self, info: NodeInfo) -> None:
        """This node's hardware and OS (from ``nodeinfo:get``)."""
        self._set_details(SelfDetails(info, self._details.engines))

    def set_self_engines(self, statuses: Sequence[EngineStatus]) -> None:
        """All of this node's engines (an engines snapshot)."""
        ordered = tuple(sorted(statuses, key=lambda status: status.display_name.casefold()))
        self._set_details(SelfDetails(self._details.info, ordered))

    def update_self_engine(self, status: EngineStatus) -> None:
        """One of this node's engines changed (an ``engine:event``)."""
        others = [known for known in self._details.engines if known.engine != status.engine]
        self.set_self_engines([*others, status])

    def clear(self) -> None:
        """Forget every node and this node's details (one reset: the session ended)."""
        self.beginResetModel()
        self._nodes, self._cards, self._history = [], [], {}
        self._details = SelfDetails()
        self.endResetModel()

    # Internals -------------------------------------------------------------------------------

    def _insert(self, node: DiscoveredNode) -> None:
        position = self._sorted_position(node)
        self.beginInsertRows(_NO_PARENT, position, position)
        self._nodes.insert(position, node)
        self._cards.insert(position, build_card(node, self._details))
        self.endInsertRows()

    def _replace(self, position: int, node: DiscoveredNode, *, force: bool = False) -> None:
        """Store ``node`` (moving its row if its sort key changed); ``dataChanged`` if its card
        changed or ``force`` (its history grew)."""
        card = build_card(node, self._details)
        if sort_key(node) != sort_key(self._nodes[position]):
            position = self._move(position, node)
        self._nodes[position] = node
        if force or card != self._cards[position]:
            self._cards[position] = card
            self._changed(position)

    def _move(self, position: int, node: DiscoveredNode) -> int:
        others = self._nodes[:position] + self._nodes[position + 1 :]
        target = sum(1 for other in others if sort_key(other) < sort_key(node))
        if target == position:
            return position
        # Qt counts the destination before the move: moving down lands before target + 1.
        self.beginMoveRows(_NO_PARENT, position, position, _NO_PARENT, target + (target > position))
        self._nodes.insert(target, self._nodes.pop(position))
        self._cards.insert(target, self._cards.pop(position))
        self.endMoveRows()
        return target

    def _sorted_position(self, node: DiscoveredNode) -> int:
        return sum(1 for other in self._nodes if sort_key(other) < sort_key(node))

    def _record(self, node_id: str, telemetry: NodeTelemetry | None, at: float | None) -> bool:
        """Append a chart sample for a valid reading newer than the last; True if appended."""
        if telemetry is None or not telemetry.valid or at is None:
            return False
        history = self._history.setdefault(node_id, deque(maxlen=HISTORY_LENGTH))
        if history and history[-1].at >= at:
            return False
        history.append(sample_of(telemetry, at))
        return True

    def _set_details(self, details: SelfDetails) -> None:
        self._details = details
        for position, node in enumerate(self._nodes):
            if "self" in node.sources:
                self._replace(position, node)

    def _changed(self, position: int) -> None:
        index = self.index(position, 0)
        self.dataChanged.emit(index, index)


_ROLE_VALUES: dict[int, Callable[[NodeCard], object]] = {
    NodeRole.NODE_ID: lambda card: card.node_id,
    NodeRole.KIND: lambda card: card.kind,
    NodeRole.IS_SELF: lambda card: card.is_self,
    NodeRole.REACHABLE: lambda card: card.reachable,
    NodeRole.OS: lambda card: card.os,
    NodeRole.CPU_PERCENT: lambda card: card.cpu_percent,
    NodeRole.MEMORY_USED: lambda card: card.memory_used_bytes,
    NodeRole.MEMORY_TOTAL: lambda card: card.memory_total_bytes,
    NodeRole.GPUS: lambda card: card.gpus,
    NodeRole.ENGINES: lambda card: card.engines,
    NodeRole.CARD: lambda card: card,
}
