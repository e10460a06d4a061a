"""The cluster this node belongs to and the members it trusts, kept in ``pair.db``.

Membership is a two-phase set: members are added (provisionally while a pairing waits for the
joiner's proof that it committed, then for good) and removed by a tombstone holding the signed
removal proof. A tombstone another member wrote is never lifted, so a removed machine comes
back only with a new identity and a new invite; one the node wrote itself by leaving gives way
to a later pairing by PIN (see ``merge.py``). Every change is one durable transaction: what
another computer is told has happened is on disk first.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec.structs import replace

from backend.components.cluster.endorsements import Endorsement, RemovalProof, Tombstone, Voucher
from backend.core.store import Store
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import RemovedFromCluster

CLUSTER_ID_KEY = "cluster_id"
CLUSTER_NAME_KEY = "cluster_name"
CLUSTER_NAME_AT_KEY = "cluster_name_at"
REMOVED_FROM_KEY = "removed_from"
DEFAULT_CLUSTER_NAME = "My computers"

Statement = tuple[str, Sequence[Any]]


class Member(msgspec.Struct, frozen=True):
    """A node this one trusts: its pinned certificate and where it was last reached.

    ``endorsements`` are the signed statements that vouch for it (the one it was admitted by
    first, then this node's own), passed on to other members in the roster.
    """

    node_id: NodeId
    name: str
    cert_der: bytes
    fingerprint: str
    added_by: NodeId
    added_at: float
    address: str
    node_port: int
    provisional: bool = False
    endorsements: tuple[Endorsement, ...] = ()

    def voucher(self) -> Voucher:
        """This member's certificate and endorsements, to vouch for it elsewhere."""
        return Voucher(
            node_id=self.node_id, cert_der=self.cert_der, endorsements=list(self.endorsements[-8:])
        )

    @property
    def endorsed_at(self) -> float:
        """When the newest endorsement of this member was issued (0 without any)."""
        return max((e.issued_at for e in self.endorsements), default=0.0)


class Membership(msgspec.Struct, frozen=True):
    """The cluster (absent while this node is in none), its members and its tombstones."""

    cluster_id: str | None = None
    cluster_name: str = ""
    members: dict[NodeId, Member] = msgspec.field(default_factory=dict)
    removed: frozenset[str] = frozenset()  # fingerprints of removed members
    cluster_name_at: float = 0.0  # when the name was set (the newest rename wins)
    tombstones: dict[str, Tombstone] = msgspec.field(default_factory=dict)  # by removed fingerprint
    removed_from: RemovedFromCluster | None = None

    @property
    def proofs(self) -> dict[str, RemovalProof]:
        """The removal proofs held, by removed fingerprint."""
        return {fingerprint: t.proof for fingerprint, t in self.tombstones.items()}

    @property
    def clustered(self) -> bool:
        """Whether this node belongs to a cluster."""
        return self.cluster_id is not None

    def removed_node_ids(self) -> frozenset[str]:
        """The node ids of the nodes removed from the cluster (or that left it) for good."""
        return frozenset(tombstone.proof.node_id for tombstone in self.tombstones.values())

    def trusted(self) -> list[Member]:
        """Members whose pin is final (provisional ones serve only the pairing's last step)."""
        return [m for m in self.members.values() if not m.provisional]

    def pin_for(self, cert_der: bytes) -> Member | None:
        """The member with exactly this certificate (byte for byte), if any."""
        for member in self.members.values():
            if member.cert_der == cert_der and member.fingerprint not in self.removed:
                return member
        return None

    def with_fingerprint(self, fingerprint: str) -> Member | None:
        """The member whose certificate has ``fingerprint``, if any."""
        for member in self.members.values():
            if member.fingerprint == fingerprint:
                return member
        return None


class Changes(msgspec.Struct, frozen=True):
    """What a merge, a removal or a rename changes, applied as one transaction."""

    pinned: Sequence[Member] = ()  # new members (a tombstone left by their own leave goes)
    tombstones: Sequence[Tombstone] = ()  # new ones; members with those certificates go
    name: tuple[str, float] | None = None  # the cluster's new name and when it was set
    addresses: Sequence[tuple[NodeId, str, int]] = ()  # members reached somewhere else now

    def __bool__(self) -> bool:
        return bool(self.pinned or self.tombstones or self.name or self.addresses)


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
            " provisional, endorsements FROM cluster_members"
        )
        members = {NodeId(str(row[0])): _member(row) for row in rows}
        rows = await self._store.fetch_all("SELECT fingerprint, record FROM cluster_tombstones")
        tombstones = {str(row[0]): t for row in rows if (t := _decode(row[1], Tombstone))}
        return Membership(
            cluster_id=state.get(CLUSTER_ID_KEY),
            cluster_name=str(state.get(CLUSTER_NAME_KEY, "")),
            members=members,
            removed=frozenset(str(row[0]) for row in rows),
            cluster_name_at=float(state.get(CLUSTER_NAME_AT_KEY, 0.0)),
            tombstones=tombstones,
            removed_from=_decode(state.get(REMOVED_FROM_KEY, "").encode(), RemovedFromCluster),
        )

    async def add(self, member: Member, *, cluster_id: str, cluster_name: str) -> None:
        """Join (or stay in) ``cluster_id`` and pin ``member``, in one durable transaction."""
        await self._store.transaction(
            [*_set_cluster(cluster_id, cluster_name), *_pin(member)], durable=True
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

    async def apply(self, changes: Changes) -> None:
        """Pin, tombstone, rename and re-address as ``changes`` says, all or nothing."""
        statements: list[Statement] = []
        for member in changes.pinned:
            statements += _pin(member)
        for tombstone in changes.tombstones:
            statements += _tombstone(tombstone)
        if changes.name is not None:
            name, at = changes.name
            sql = "INSERT OR REPLACE INTO cluster_state (key, value) VALUES (?, ?)"
            statements += [(sql, (CLUSTER_NAME_KEY, name)), (sql, (CLUSTER_NAME_AT_KEY, str(at)))]
        for node_id, address, port in changes.addresses:
            statements.append(
                (
                    "UPDATE cluster_members SET address = ?, node_port = ? WHERE node_id = ?",
                    (address, port, node_id),
                )
            )
        await self._store.transaction(statements, durable=True)

    async def leave(self, removed_from: RemovedFromCluster | None = None) -> None:
        """Leave the cluster: every pin and tombstone goes; a new invite is the way back.

        ``removed_from``: another member removed this node (kept so the status can say so).
        """
        statements: list[Statement] = [
            ("DELETE FROM cluster_members", ()),
            ("DELETE FROM cluster_tombstones", ()),
            ("DELETE FROM cluster_state", ()),
        ]
        if removed_from is not None:
            value = msgspec.json.encode(removed_from).decode()
            statements.append(
                ("INSERT INTO cluster_state (key, value) VALUES (?, ?)", (REMOVED_FROM_KEY, value))
            )
        await self._store.transaction(statements, durable=True)


def with_member(membership: Membership, member: Member) -> Membership:
    """``membership`` with ``member`` added or replaced (the in-memory twin of ``add``)."""
    return replace(membership, members={**membership.members, member.node_id: member})


def applied(membership: Membership, changes: Changes) -> Membership:
    """``membership`` after ``changes`` (the in-memory twin of ``MemberStore.apply``)."""
    members = dict(membership.members)
    tombstones = dict(membership.tombstones)
    removed = set(membership.removed)
    for member in changes.pinned:
        held = tombstones.get(member.fingerprint)
        if member.fingerprint in removed and (held is None or not held.proof.left):
            continue  # removed for good (``_pin`` refuses it the same way)
        members[member.node_id] = member
        tombstones.pop(member.fingerprint, None)
        removed.discard(member.fingerprint)
    for tombstone in changes.tombstones:
        tombstones[tombstone.proof.fingerprint] = tombstone
        removed.add(tombstone.proof.fingerprint)
    members = {k: v for k, v in members.items() if v.fingerprint not in removed}
    for node_id, address, port in changes.addresses:
        if node_id in members:
            members[node_id] = replace(members[node_id], address=address, node_port=port)
    name, at = changes.name or (membership.cluster_name, membership.cluster_name_at)
    return replace(
        membership,
        members=members,
        tombstones=tombstones,
        removed=frozenset(removed),
        cluster_name=name,
        cluster_name_at=at,
    )


def _set_cluster(cluster_id: str, name: str) -> list[Statement]:
    sql = "INSERT OR REPLACE INTO cluster_state (key, value) VALUES (?, ?)"
    return [
        (sql, (CLUSTER_ID_KEY, cluster_id)),
        (sql, (CLUSTER_NAME_KEY, name)),
        ("DELETE FROM cluster_state WHERE key = ?", (REMOVED_FROM_KEY,)),
    ]


def _pin(member: Member) -> list[Statement]:
    """Pin ``member``: a tombstone of its own leave goes; one another member wrote stays, and
    then nothing is pinned (the store itself keeps removals permanent)."""
    endorsements = msgspec.json.encode(list(member.endorsements))
    return [
        (
            "DELETE FROM cluster_tombstones WHERE fingerprint = ? AND node_id = removed_by",
            (member.fingerprint,),
        ),
        (
            "INSERT OR REPLACE INTO cluster_members (node_id, name, cert_der, fingerprint,"
            " added_by, added_at, address, node_port, provisional, endorsements)"
            " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
            " WHERE NOT EXISTS (SELECT 1 FROM cluster_tombstones WHERE fingerprint = ?)",
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
                endorsements,
                member.fingerprint,
            ),
        ),
    ]


def _tombstone(tombstone: Tombstone) -> list[Statement]:
    proof = tombstone.proof
    return [
        ("DELETE FROM cluster_members WHERE fingerprint = ?", (proof.fingerprint,)),
        (
            "INSERT OR REPLACE INTO cluster_tombstones (fingerprint, node_id, removed_by,"
            " removed_at, record) VALUES (?, ?, ?, ?, ?)",
            (
                proof.fingerprint,
                proof.node_id,
                proof.remover,
                proof.removed_at,
                msgspec.json.encode(tombstone),
            ),
        ),
    ]


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
        endorsements=tuple(_decode(row[9], list[Endorsement]) or ()),
    )


def _decode(raw: object, kind: type[Any]) -> Any:
    """A stored JSON value, or None when it is empty (rows from before the column existed)."""
    if not isinstance(raw, bytes | str) or not raw:
        return None
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class Members:
    """The membership in memory, written through ``MemberStore`` before memory changes."""

    def __init__(self, store: MemberStore) -> None:
        self._store = store
        self.current = Membership()

    async def open(self) -> Membership:
        """Read what is stored (call once, before anything else). A provisional pin belongs to
        a pairing that a restart interrupted (invites live in memory): it is undone, so a
        crash mid-pairing leaves this node as it was before the invite."""
        self.current = await self._store.load()
        for member in list(self.current.members.values()):
            if member.provisional:
                await self.undo_join(member.node_id)
        return self.current

    async def add(self, member: Member, *, cluster_id: str, cluster_name: str) -> None:
        """Pin ``member`` in ``cluster_id`` (durable first)."""
        name = cluster_name or self.current.cluster_name or DEFAULT_CLUSTER_NAME
        await self._store.add(member, cluster_id=cluster_id, cluster_name=name)
        joined = applied(self.current, Changes(pinned=[member]))
        self.current = replace(joined, cluster_id=cluster_id, cluster_name=name, removed_from=None)

    async def confirm(self, node_id: NodeId) -> None:
        """Make a provisional pin final."""
        member = self.current.members.get(node_id)
        if member is None:
            return
        await self._store.confirm(node_id)
        self.current = with_member(self.current, replace(member, provisional=False))

    async def apply(self, changes: Changes) -> None:
        """Apply ``changes`` (durable first); nothing happens outside a cluster."""
        if not changes or not self.current.clustered:
            return
        await self._store.apply(changes)
        self.current = applied(self.current, changes)

    async def leave(self, removed_from: RemovedFromCluster | None = None) -> None:
        """Leave the cluster (durable first): no pins, no tombstones, no cluster."""
        await self._store.leave(removed_from)
        self.current = Membership(removed_from=removed_from)

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
