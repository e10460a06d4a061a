"""Which members the routing table may send to: those whose member link is up.

The member link (``backend/components/federation``) is the one sign of a member's liveness the
table follows: a pinned mutual-TLS session that pings every second and is down within seconds
of going silent. Discovery alone cannot say so: an mDNS record may still arrive from a member
whose TCP is dead (or from anyone claiming to be it), and its telemetry poll backs off for up
to half a minute after failures. Discovery still says where a member's relay is and what its
engines list; ``MemberInventory`` keeps the last of that for a linked member discovery has
dropped meanwhile (its mDNS record expired during an outage), so a member whose link comes
back is routable again at once, without waiting for discovery to find it again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from backend.protocol.types.nodes import DiscoveredNode


class MemberInventory:
    """The last discovery entry of each member seen (no tasks, no I/O)."""

    def __init__(self) -> None:
        self._last: dict[str, DiscoveredNode] = {}

    def complete(
        self, nodes: Sequence[DiscoveredNode], members: Collection[str]
    ) -> Sequence[DiscoveredNode]:
        """``nodes``, plus the last known entry of each of ``members`` they lack (only a linked
        one becomes a target); the entries of nodes no longer members are forgotten."""
        listed = set()
        for node in nodes:
            listed.add(node.node_id)
            if node.node_id in members and node.kind == "pair" and "self" not in node.sources:
                self._last[node.node_id] = node
        for node_id in [node_id for node_id in self._last if node_id not in members]:
            del self._last[node_id]
        missing = [node for node_id, node in self._last.items() if node_id not in listed]
        return [*nodes, *missing] if missing else nodes
