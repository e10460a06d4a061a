"""Manual nodes: addresses the user added, persisted in the store, with pure probe bookkeeping.

A manual address that answers node-info is that PAIR node (keyed by its UUID, merged with the
same node found over mDNS); one that answers only as a bare engine is an engine-only node keyed
by the manual id; after ``FAILURES_TO_REPORT`` failed probes in a row the error
``discovery:manual-unreachable:<id>`` is raised, and cleared by the next answer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import msgspec

from backend.common.hostport import AddressError, parse_host
from backend.core.store import Store
from backend.protocol import errors
from backend.protocol.types.base import ManualNodeId
from backend.protocol.types.nodes import ManualNode, ManualNodeAdd

FAILURES_TO_REPORT = 3
ERROR_PREFIX = "discovery:manual-unreachable:"
# How much of a refused address an error message repeats.
_SHOWN_LENGTH = 80


class PairAnswered(msgspec.Struct, frozen=True):
    """The address answered node-info as the PAIR node ``node_id``."""

    node_id: str


class EngineAnswered(msgspec.Struct, frozen=True):
    """The address answered as a bare engine."""

    engine: str


class NoAnswer(msgspec.Struct, frozen=True):
    """Neither PAIR nor an engine answered."""

    reason: str


ProbeOutcome = PairAnswered | EngineAnswered | NoAnswer


def manual_id(address: str, port: int) -> ManualNodeId:
    """The stable id of a manual entry."""
    return ManualNodeId(f"manual:{address.lower()}:{port}")


def entries_of_removed(
    entries: Iterable[ManualNode],
    removed: Collection[str],
    member_addresses: Mapping[str, tuple[str, int]],
) -> list[str]:
    """The ids of the entries that point at a node removed from the cluster: by the node id the
    entry answered as, or by the address and port the node had as a member."""
    gone = {
        manual_id(*member_addresses[node_id]) for node_id in removed if node_id in member_addresses
    }
    return [entry.id for entry in entries if entry.node_id in removed or entry.id in gone]


def error_id(node_id: str) -> str:
    """The errors-registry id raised while a manual node does not answer."""
    return ERROR_PREFIX + node_id


def validate(params: ManualNodeAdd) -> ManualNodeAdd:
    """Normalised parameters of ``nodes:add`` (the host alone: an IPv4 or IPv6 address, with or
    without brackets, or a host name), or ``InvalidParams`` saying what is wrong."""
    if not params.address.strip():
        raise errors.InvalidParams("give the other computer's address (an IP address or a name)")
    try:
        address = parse_host(params.address)
    except AddressError as exc:
        shown = params.address.strip()[:_SHOWN_LENGTH]
        raise errors.InvalidParams(f'"{shown}" is not an address: {exc}') from None
    if not 1 <= params.port <= 65535:
        raise errors.InvalidParams(f"port {params.port} is outside 1-65535")
    name = params.name.strip() if params.name and params.name.strip() else None
    return ManualNodeAdd(address=address, port=params.port, name=name)


def after_probe(node: ManualNode, outcome: ProbeOutcome, at: float) -> ManualNode:
    """The entry after a probe (pure)."""
    match outcome:
        case PairAnswered(node_id=node_id):
            return msgspec.structs.replace(
                node, state="pair", node_id=node_id, failures=0, last_error=None, last_seen=at
            )
        case EngineAnswered():
            return msgspec.structs.replace(
                node, state="engine", node_id=node.id, failures=0, last_error=None, last_seen=at
            )
        case NoAnswer(reason=reason):
            failures = node.failures + 1
            state = "unreachable" if failures >= FAILURES_TO_REPORT else node.state
            return msgspec.structs.replace(node, state=state, failures=failures, last_error=reason)


def error_transition(before: ManualNode, after: ManualNode) -> bool | None:
    """``True`` to raise the unreachable error, ``False`` to clear it, ``None`` for no change."""
    if after.failures == FAILURES_TO_REPORT and before.failures < FAILURES_TO_REPORT:
        return True
    if after.failures == 0 and before.failures >= FAILURES_TO_REPORT:
        return False
    return None


class ManualNodeStore:
    """The ``manual_nodes`` table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self) -> list[ManualNode]:
        """Every saved entry, oldest first, as not yet probed."""
        rows = await self._store.fetch_all(
            "SELECT id, address, port, name, added_at FROM manual_nodes ORDER BY added_at"
        )
        return [
            ManualNode(
                id=ManualNodeId(str(row[0])),
                address=str(row[1]),
                port=int(row[2]),
                name=row[3],
                added_at=float(row[4]),
                state="probing",
            )
            for row in rows
        ]

    async def insert(self, node: ManualNode) -> None:
        """Save a new entry."""
        await self._store.execute(
            "INSERT OR REPLACE INTO manual_nodes (id, address, port, name, added_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (node.id, node.address, node.port, node.name, node.added_at),
        )

    async def delete(self, node_id: str) -> None:
        """Forget an entry."""
        await self._store.execute("DELETE FROM manual_nodes WHERE id = ?", (node_id,))
