"""The spread host as a broker component: where its figures come from, and its shutdown.

``SpreadHost`` reads this computer's free memory from its own telemetry and each member's from
what discovery last fetched of its node-info, whether a member's link is up from the member
engines board, and trust from the cluster. The component owns the dialer its tunnels run on;
it starts before the engines, so it stops after them (their llama-server is gone by then).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from backend.components.cluster.members import Member, Membership
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.components.split.host import Peer, SpreadHost
from backend.components.split.members import Candidate, candidate_from_figures
from backend.components.split.tunnel_listener import MemberDialer
from backend.core.component import Component
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import DiscoveredNode


class SpreadSources:
    """Reads the figures a plan needs from the broker's live state, at the moment it plans."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        name: Callable[[], str],
        telemetry: Callable[[], TelemetryView],
        membership: Callable[[], Membership],
        reachable: Callable[[NodeId], bool],
        nodes: Callable[[], Sequence[DiscoveredNode]],
    ) -> None:
        self._node_id = node_id
        self._name = name
        self._telemetry = telemetry
        self._membership = membership
        self._reachable = reachable
        self._nodes = nodes

    def host(self) -> Candidate:
        """This computer, from its own latest telemetry."""
        view = self._telemetry()
        memory = view.memory
        return candidate_from_figures(
            self._node_id, self._name(), memory.total_bytes, memory.used_bytes, view.gpus
        )

    def peers(self) -> list[Peer]:
        """Every other trusted member: its link, and its figures as discovery last read them."""
        found = {node.node_id: node for node in self._nodes()}
        return [
            Peer(member, self._reachable(member.node_id), _candidate(member, found))
            for member in self._membership().trusted()
            if member.node_id != self._node_id
        ]


class SpreadComponent(Component):
    """Owns the spread host and the dialer of its tunnels."""

    def __init__(self, sources: SpreadSources, dialer: MemberDialer) -> None:
        super().__init__("spread")
        self.host = SpreadHost(host=sources.host, peers=sources.peers, dial=dialer)
        self._dialer = dialer
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Nothing to do but wait: the work happens at each llama.cpp launch."""
        await self._stopped.wait()

    async def stop(self) -> None:
        """Close the tunnel listeners and the dialer's connections."""
        await self.host.close()
        await self._dialer.close()
        self._stopped.set()


def _candidate(member: Member, found: dict[NodeId, DiscoveredNode]) -> Candidate:
    node = found.get(member.node_id)
    telemetry = node.telemetry if node is not None else None
    if telemetry is None or not telemetry.valid:
        return Candidate(member.node_id, None, (), member.name)
    return candidate_from_figures(
        member.node_id,
        member.name,
        telemetry.memory_total_bytes,
        telemetry.memory_used_bytes,
        telemetry.gpus or [],
    )
