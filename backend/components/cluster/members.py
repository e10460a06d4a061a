"""The cluster this node belongs to and the members it trusts, kept in ``pair.db``.

Membership is a two-phase set: members are added (provisionally while a pairing waits for the
joiner's proof that it committed, then for good) and removed by a tombstone that is never
lifted, so a removed machine comes back only with a new identity and a new invite. Every change
is one durable transaction: what another computer is told has happened is on disk first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from backend.core.store import Store
from backend.protocol.types import NodeId

CLUSTER_ID_KEY = "cluster_id"
CLUSTER_NAME_KEY = "cluster_name"
DEFAULT_CLUSTER_NAME = "My computers"


@dataclass(frozen=True, slots=True)
class Member:
    """A node this one trusts: its pinned certificate and where it was last reached."""

    node_id: NodeId
    name: str
    cert_der: bytes
    fingerprint: str
    added_by: NodeId
    added_at: float
    address: str
    node_port: int
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class Membership:
    """The cluster (absent while this node is in none), its members and its tombstones."""

    cluster_id: str | None = None
    cluster_name: str = ""
    members: dict[NodeId, Member] = field(default_factory=dict)
    removed: frozenset[str] = frozenset()  # fingerprints of removed members

    @property
    def clustered(self) -> bool:
        """Whether this node belongs to a cluster."""
        return self.cluster_id is not None

    def trusted(self) -> list[Member]:
        """Members whose pin is final (provisional ones serve only the pairing's last step)."""
        return [m for m in self.members.values() if not m.provisional]

    def pin_for(self, cert_der: bytes) -> Member | None:
        """The member with exactly this certificate (byte for byte), if any."""
        for member in self.members.values():
            if member.cert_der == cert_der and member.fingerprint not in self.removed:
                return member
        return None


def new_cluster_id() -> str:
    """A fresh cluster id (a UUID; it names the cluster, it is not a secret)."""
    return str(uuid.uuid4())


class MemberStore:
    """Reads and writes the membership; owns no tasks (every call is one transaction)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self) -> Membership:
        """The membership as stored."""
        rows = await self._store.fetch_all("SELECT key, value FROM cluster_state")
        state = {str(key): str(value) for key, value in rows}
        rows = await self._store.fetch_all(
            "SELECT node_id, name, cert_der, fingerprint, added_by, added_at, address, node_port,"
            " provisional FROM cluster_members"
        )
        members = {NodeId(str(row[0])): _member(row) for row in rows}
        removed = await self._store.fetch_all("SELECT fingerprint FROM cluster_tombstones")
        return Membership(
            cluster_id=state.get(CLUSTER_ID_KEY),
            cluster_name=str(state.get(CLUSTER_NAME_KEY, "")),
            members=members,
            removed=frozenset(str(row[0]) for row in removed),
        )

    async def add(self, member: Member, *, cluster_id: str, cluster_name: str) -> None:
        """Join (or stay in) ``cluster_id`` and pin ``member``, in one durable transaction."""
        await self._store.transaction(
            [
                *_set_cluster(cluster_id, cluster_name),
                (
                    "INSERT OR REPLACE INTO cluster_members (node_id, name, cert_der, fingerprint,"
                    " added_by, added_at, address, node_port, provisional)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        member.node_id,
                        member.name,
                        member.cert_der,
                        member.fingerprint,
                        member.added_by,
                        member.added_at,
                        member.address,
                        member.node_port,
                        int(member.provisional),
                    ),
                ),
            ],
            durable=True,
        )

    async def confirm(self, node_id: NodeId) -> None:
        """A provisional member proved it committed: its pin is final."""
        await self._store.transaction(
            [("UPDATE cluster_members SET provisional = 0 WHERE node_id = ?", (node_id,))],
            durable=True,
        )

    async def forget(self, node_id: NodeId) -> None:
        """Drop a member without a tombstone (a pairing that never completed)."""
        await self._store.transaction(
            [("DELETE FROM cluster_members WHERE node_id = ?", (node_id,))], durable=True
        )

    async def remove(self, member: Member, *, by: NodeId, at: float) -> None:
        """Remove ``member`` for good: its pin goes and its fingerprint is tombstoned."""
        await self._store.transaction(
            [
                ("DELETE FROM cluster_members WHERE node_id = ?", (member.node_id,)),
                (
                    "INSERT OR REPLACE INTO cluster_tombstones (fingerprint, node_id, removed_by,"
                    " removed_at) VALUES (?, ?, ?, ?)",
                    (member.fingerprint, member.node_id, by, at),
                ),
            ],
            durable=True,
        )

    async def rename(self, name: str) -> None:
        """Rename the cluster."""
        await self._store.transaction(
            [("UPDATE cluster_state SET value = ? WHERE key = ?", (name, CLUSTER_NAME_KEY))],
            durable=True,
        )

    async def leave(self) -> None:
        """Leave the cluster: every pin and tombstone goes; a new invite is the way back."""
        await self._store.transaction(
            [
                ("DELETE FROM cluster_members", ()),
                ("DELETE FROM cluster_tombstones", ()),
                ("DELETE FROM cluster_state", ()),
            ],
            durable=True,
        )


def with_member(membership: Membership, member: Member) -> Membership:
    """``membership`` with ``member`` added or replaced (the in-memory twin of ``add``)."""
    return replace(membership, members={**membership.members, member.node_id: member})


def _set_cluster(cluster_id: str, name: str) -> list[tuple[str, tuple[str, str]]]:
    sql = "INSERT OR REPLACE INTO cluster_state (key, value) VALUES (?, ?)"
    return [(sql, (CLUSTER_ID_KEY, cluster_id)), (sql, (CLUSTER_NAME_KEY, name))]


def _member(row: tuple[object, ...]) -> Member:
    return Member(
        node_id=NodeId(str(row[0])),
        name=str(row[1]),
        cert_der=bytes(row[2]),  # type: ignore[call-overload]
        fingerprint=str(row[3]),
        added_by=NodeId(str(row[4])),
        added_at=float(row[5]),  # type: ignore[arg-type]
        address=str(row[6]),
        node_port=int(row[7]),  # type: ignore[call-overload]
        provisional=bool(row[8]),
    )


class Members:
    """The membership in memory, written through ``MemberStore`` before memory changes."""

    def __init__(self, store: MemberStore) -> None:
        self._store = store
        self.current = Membership()

    async def open(self) -> Membership:
        """Read what is stored (call once, before anything else)."""
        self.current = await self._store.load()
        return self.current

    async def add(self, member: Member, *, cluster_id: str, cluster_name: str) -> None:
        """Pin ``member`` in ``cluster_id`` (durable first)."""
        name = cluster_name or self.current.cluster_name or DEFAULT_CLUSTER_NAME
        await self._store.add(member, cluster_id=cluster_id, cluster_name=name)
        self.current = replace(
            with_member(self.current, member), cluster_id=cluster_id, cluster_name=name
        )

    async def confirm(self, node_id: NodeId) -> None:
        """Make a provisional pin final."""
        member = self.current.members.get(node_id)
        if member is None:
            return
        await self._store.confirm(node_id)
        self.current = with_member(self.current, replace(member, provisional=False))

    async def undo_join(self, node_id: NodeId) -> None:
        """Drop a pin whose pairing did not complete; a cluster left with no member dissolves
        (it was founded by that pairing), so this node is as it was before the invite."""
        await self._store.forget(node_id)
        members = {k: v for k, v in self.current.members.items() if k != node_id}
        if members:
            self.current = replace(self.current, members=members)
            return
        await self._store.leave()
        self.current = Membership()
