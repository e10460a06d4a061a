"""The federation component: one member link per trusted member, following the membership.

It is what makes the other members manageable from this node: calls with ``node`` set go over
the member's link (``forward``), and each link mirrors the member's engines (published on this
node's ``engine`` stream as ``member_changed``), its open errors (tagged with its node id) and
the jobs it received (into this node's job history). A member that leaves takes its engines and
errors with it (``member_left``); its jobs stay in the history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from backend.common.certificates import NodeCredentials
from backend.common.listeners import Listeners
from backend.common.tasks import TaskSet
from backend.components.cluster.members import Member, Membership
from backend.components.federation.link import UNREACHABLE_ID, LinkSinks, MemberLink
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.rpc import NOT_FORWARDED, NumberedStream
from backend.protocol import errors, methods
from backend.protocol.contract import Method
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import (
    EngineEvent,
    MemberEngines,
    MemberEnginesChanged,
    MemberEnginesLeft,
)

log = logging.getLogger(__name__)

Addresses = Callable[[Member], list[tuple[str, int]]]
_NODE_FIELD = {methods.ERRORS_CLEAR.name: "node_id"}


class MemberEnginesBoard:
    """Other members' engines as their links last told them; changes go out on the ``engine``
    stream (the engines component puts ``members()`` in its snapshot)."""

    def __init__(self, events: NumberedStream[EngineEvent]) -> None:
        self.events = events
        self._members: dict[NodeId, MemberEngines] = {}
        self._presence_listeners = Listeners()

    def on_presence(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a member's link goes up or down."""
        self._presence_listeners.add(listener)

    def reachable(self, node_id: NodeId) -> bool:
        """Whether this node's link to ``node_id`` is up."""
        member = self._members.get(node_id)
        return member is not None and member.reachable

    def linked(self) -> frozenset[NodeId]:
        """The members whose link is up now: the only ones the routing table may send to."""
        return frozenset(node for node, member in self._members.items() if member.reachable)

    def members(self) -> list[MemberEngines]:
        """Every other member's engines, by node id."""
        return [self._members[node] for node in sorted(self._members)]

    def get(self, node_id: NodeId) -> MemberEngines | None:
        """One member's engines, if it is a member."""
        return self._members.get(node_id)

    def changed(self, member: MemberEngines) -> None:
        """A member's engines changed (or its link went up or down)."""
        before = self._members.get(member.node_id)
        if before == member:
            return
        self._members[member.node_id] = member
        self.events.publish(partial(_changed, member))
        if before is None or before.reachable != member.reachable:
            self._presence()

    def left(self, node_id: NodeId) -> None:
        """A node is no longer a member."""
        if self._members.pop(node_id, None) is not None:
            self.events.publish(partial(_left, node_id))
            self._presence()

    def _presence(self) -> None:
        self._presence_listeners.notify()


class FederationComponent(Component):
    """Owns the links (a task each, in a ``TaskSet``); started after the cluster."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        credentials: NodeCredentials,
        membership: Callable[[], Membership],
        addresses: Addresses,
        sinks: LinkSinks,
        board: MemberEnginesBoard,
        clock: Clock,
    ) -> None:
        super().__init__("federation")
        self._node_id = node_id
        self._credentials = credentials
        self._membership = membership
        self._addresses = addresses
        self._sinks = sinks
        self._board = board
        self._clock = clock
        self._links: dict[NodeId, tuple[MemberLink, asyncio.Task[None]]] = {}
        self._tasks = TaskSet("federation")
        self._running = False
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Link every trusted member until stopped; follow membership changes meanwhile."""
        self._stopped.clear()
        self._running = True
        self.trust_changed(self._membership())
        self.announce_ready()
        try:
            await self._stopped.wait()
        finally:
            self._running = False
            self._links.clear()
            await asyncio.shield(self._tasks.close(timeout=3.0))

    async def stop(self) -> None:
        """Close every link."""
        self._stopped.set()

    def trust_changed(self, membership: Membership) -> None:
        """Start links for new members, rename, and drop those no longer trusted."""
        if not self._running:
            return
        trusted = {m.node_id: m for m in membership.trusted() if m.node_id != self._node_id}
        for node_id in list(self._links):
            if node_id not in trusted:
                link, task = self._links.pop(node_id)
                link.retire()  # its task's last words must not bring the member back
                task.cancel()
                self._board.left(node_id)
                self._sinks.errors(node_id, [])
                log.info("member %s left: its link is closed", link.name)
        for node_id, member in trusted.items():
            known = self._links.get(node_id)
            if known is not None:
                known[0].renamed(member.name)
                continue
            link = MemberLink(
                member,
                credentials=self._credentials,
                addresses=partial(self._member_addresses, node_id),
                sinks=self._sinks,
                clock=self._clock,
            )
            self._board.changed(link.state)
            task = self._tasks.spawn(link.run(), name=member.name)
            self._links[node_id] = (link, task)

    async def forward(self, method: Method[Any, Any], params: Any) -> Any:
        """The ``Dispatcher`` forwarder: a call whose params name another member goes to it."""
        field = _NODE_FIELD.get(method.name, "node")
        node = getattr(params, field, None)
        if node is None or node == self._node_id:
            return NOT_FORWARDED
        if method is methods.ERRORS_CLEAR and getattr(params, "id", "") == UNREACHABLE_ID:
            return NOT_FORWARDED  # this node's own note about the member
        entry = self._links.get(node)
        if entry is None:
            if method is methods.ERRORS_CLEAR:
                return NOT_FORWARDED  # an error of a node that is no longer linked
            raise errors.NotFound(f"{node} is not a member of this node's cluster")
        return await entry[0].call(method, _without_node(params, field))

    def _member_addresses(self, node_id: NodeId) -> list[tuple[str, int]]:
        member = self._membership().members.get(node_id)
        return self._addresses(member) if member is not None else []


def _without_node(params: Any, field: str) -> Any:
    return msgspec.structs.replace(params, **{field: None})


def _changed(member: MemberEngines, seq: int) -> EngineEvent:
    return MemberEnginesChanged(seq=seq, member=member)


def _left(node_id: NodeId, seq: int) -> EngineEvent:
    return MemberEnginesLeft(seq=seq, node_id=node_id)
