"""Which nodes may serve a request and in what order; reservations that spread bursts.

Order: a manual pin (if eligible), then the scheduler's priority list, then a stable order.
Among the first group the least loaded node (pending work + GPU pressure + reservations) goes
first. Reservations carry the generation of the load snapshot they were counted against, so a
release that arrives after a newer snapshot cannot drive a node's load below zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from backend.components.proxy.naming import has_model

NodeId = str


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What the scheduler knows about a node's load at one snapshot."""

    pending: int = 0
    gpu_pressure: int = 0


def eligible(
    inventories: Mapping[NodeId, Mapping[str, list[str]]], engine: str, model: str
) -> list[NodeId]:
    """Nodes whose inventory for ``engine`` has ``model``, in stable (id) order."""
    return sorted(
        node
        for node, engines in inventories.items()
        if has_model(engine, engines.get(engine), model)
    )


def order(
    candidates: Sequence[NodeId],
    *,
    pin: NodeId | None = None,
    priority: Sequence[NodeId] = (),
) -> list[NodeId]:
    """Pin first (only if eligible), then the priority list, then the rest by id."""
    pool = set(candidates)
    ordered: list[NodeId] = []
    for node in [pin] if pin is not None else []:
        if node in pool:
            ordered.append(node)
    for node in priority:
        if node in pool and node not in ordered:
            ordered.append(node)
    ordered += sorted(pool - set(ordered))
    return ordered


@dataclass
class Reservations:
    """In-flight dispatches per node since the last load snapshot."""

    generation: int = 0
    loads: dict[NodeId, NodeLoad] = field(default_factory=dict)
    _held: dict[NodeId, int] = field(default_factory=dict)

    def apply_snapshot(self, generation: int, loads: Mapping[NodeId, NodeLoad]) -> bool:
        """Adopt a newer snapshot (it already counts earlier dispatches); older ones are ignored."""
        if generation <= self.generation:
            return False
        self.generation = generation
        self.loads = dict(loads)
        self._held.clear()
        return True

    def score(self, node: NodeId) -> int:
        """The node's load as the router sees it now."""
        load = self.loads.get(node, NodeLoad())
        return load.pending + load.gpu_pressure + self._held.get(node, 0)

    def pick(self, ordered: Sequence[NodeId], *, pinned: bool = False) -> tuple[NodeId, int]:
        """Reserve the least loaded node (ties keep ``ordered``'s order); a pin is honoured.

        Returns the node and the reservation's generation, to hand back to ``release``.
        """
        if not ordered:
            raise ValueError("no candidate to reserve")
        chosen = ordered[0] if pinned else min(ordered, key=self.score)
        self._held[chosen] = self._held.get(chosen, 0) + 1
        return chosen, self.generation

    def release(self, node: NodeId, generation: int) -> None:
        """Give back a reservation; one taken under an older snapshot is already forgotten."""
        if generation != self.generation:
            return
        held = self._held.get(node, 0)
        if held > 1:
            self._held[node] = held - 1
        else:
            self._held.pop(node, None)
