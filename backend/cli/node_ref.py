"""``--node NAME|ID``: which node of the cluster a command is for.

The nodes are this one (``status``) and the members ``cluster:status`` lists. A node is given by
its exact id, a unique prefix of its id (at least ``MIN_PREFIX`` characters) or its name (any
case). This node resolves to ``None``: the command then sends no ``node`` and runs locally, so
``--node`` naming this computer behaves exactly like no ``--node``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

import msgspec

from backend.cli import exit_codes
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.cluster import ClusterStatus

MIN_PREFIX = 4
SHORT_ID = 8


class KnownNode(msgspec.Struct, frozen=True):
    """A node a command can be for: this one (``here``) or a cluster member."""

    node_id: NodeId
    name: str
    here: bool = False

    def describe(self) -> str:
        """``bob (7b1d00c4)``; ``alice (0f3c2a9e, this node)``."""
        where = ", this node" if self.here else ""
        return f"{self.name} ({self.node_id[:SHORT_ID]}{where})"


class UnknownNode(Exception):
    """``--node`` names no node, or more than one; the message lists the candidates."""


class NodeDirectory(msgspec.Struct, frozen=True):
    """This node and the members of its cluster, as the broker listed them."""

    here: KnownNode
    members: tuple[KnownNode, ...] = ()
    members_unknown: str | None = None  # why ``cluster:status`` gave no members

    @classmethod
    def of(
        cls, status: BrokerStatus, cluster: ClusterStatus | None, members_unknown: str | None = None
    ) -> NodeDirectory:
        """The directory from ``status`` and ``cluster:status`` (``None``: not available)."""
        here = KnownNode(status.node_id, status.node_name, here=True)
        listed = cluster.members if cluster is not None else []
        members = tuple(
            KnownNode(member.node_id, member.name)
            for member in listed
            if member.node_id != here.node_id
        )
        return cls(here, members, members_unknown)

    @property
    def nodes(self) -> tuple[KnownNode, ...]:
        """This node first, then the members."""
        return (self.here, *self.members)

    def names(self) -> dict[NodeId, str]:
        """Node id to name, for every node known here."""
        return {node.node_id: node.name for node in self.nodes}

    def resolve(self, given: str) -> KnownNode:
        """The one node ``given`` names; raises ``UnknownNode`` listing the candidates."""
        text = given.strip()
        wanted = text.lower()
        for node in self.nodes:
            if node.node_id.lower() == wanted:
                return node
        found = {n.node_id: n for n in self.nodes if text and n.name.casefold() == text.casefold()}
        if len(wanted) >= MIN_PREFIX:
            found |= {n.node_id: n for n in self.nodes if n.node_id.lower().startswith(wanted)}
        if len(found) == 1:
            return next(iter(found.values()))
        if found:
            matched = ", ".join(node.describe() for node in found.values())
            raise UnknownNode(
                f"{given!r} matches {len(found)} nodes: {matched}; give more of the node id"
            )
        raise UnknownNode(self._no_match(given, wanted))

    def _no_match(self, given: str, wanted: str) -> str:
        too_short = wanted and any(n.node_id.lower().startswith(wanted) for n in self.nodes)
        hint = f" (give at least {MIN_PREFIX} characters of a node id)" if too_short else ""
        message = f"no node is called {given!r} or has an id starting with it{hint}. "
        if self.members_unknown is not None:
            message += f"The cluster's members are unknown ({self.members_unknown}); "
        elif not self.members:
            message += "This computer is in no cluster with other members; "
        return message + "the nodes: " + ", ".join(node.describe() for node in self.nodes)

    def target(self, given: str | None) -> KnownNode | None:
        """The member ``given`` names; ``None`` for this node or when nothing is given."""
        if given is None:
            return None
        node = self.resolve(given)
        return None if node.here else node


async def fetch_directory(peer: RpcPeer) -> NodeDirectory:
    """This node (``status``) and its cluster's members (``cluster:status``; when that fails,
    only this node, saying why)."""
    status = await contract.call(peer, methods.STATUS)
    try:
        cluster = await contract.call(peer, methods.CLUSTER_STATUS)
    except errors.RpcError as exc:
        return NodeDirectory.of(status, None, members_unknown=exc.message)
    return NodeDirectory.of(status, cluster)


NodeWork = Callable[[RpcPeer, KnownNode | None], Awaitable[int]]


def with_node(given: str | None, work: NodeWork) -> Callable[[RpcPeer], Awaitable[int]]:
    """``work`` for the member ``given`` names (``None``: this node). Without ``--node`` nothing
    extra is asked; a name that resolves to no node, or to several, is a usage error (exit 2)
    and ``work`` does not run."""

    async def resolved(peer: RpcPeer) -> int:
        if given is None:
            return await work(peer, None)
        directory = await fetch_directory(peer)
        try:
            member = directory.target(given)
        except UnknownNode as exc:
            print(f"pair: --node {given}: {exc}", file=sys.stderr)
            return exit_codes.USAGE
        return await work(peer, member)

    return resolved


def node_id_of(member: KnownNode | None) -> NodeId | None:
    """What goes in a request's ``node``: absent for this node."""
    return member.node_id if member is not None else None


def on_node(member: KnownNode | None) -> str:
    """`` on bob`` for a member, nothing for this node (to end a sentence with)."""
    return f" on {member.name}" if member is not None else ""


def add_node_option(parser: argparse.ArgumentParser) -> None:
    """``--node NAME|ID`` on a command that can run on any member."""
    parser.add_argument(
        "--node",
        metavar="NAME|ID",
        help=f"a cluster member: its name, node id or a unique id prefix ({MIN_PREFIX}+ "
        "characters); default this node",
    )
