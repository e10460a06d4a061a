"""Where to dial a member: where discovery last reached it, then where it was paired."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from backend.components.cluster.members import Member
from backend.protocol.types.nodes import DiscoveredNode


class MemberAddresses:
    """A member's node API addresses, read from discovery's list at each dial."""

    def __init__(self, nodes: Callable[[], Sequence[DiscoveredNode]]) -> None:
        self._nodes = nodes

    def __call__(self, member: Member) -> list[tuple[str, int]]:
        """Where discovery last reached the member first, then where it was paired."""
        found = [
            (address, node.ports["node"])
            for node in self._nodes()
            if node.node_id == member.node_id and "node" in node.ports
            for address in node.addresses
        ]
        paired = (member.address, member.node_port)
        return [*found, *([paired] if paired not in found else [])]
