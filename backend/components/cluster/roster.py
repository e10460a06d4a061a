"""The roster members exchange (``POST /v1/cluster/roster``, both ways) and the removal notice.

A roster is what a member knows: every member it trusts (certificate, last known address, the
endorsements that vouch for it) and every removal proof it holds, each with a voucher for its
remover. ``merge.py`` has the rules that merge one into the membership.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from backend.components.cluster.endorsements import (
    Endorsement,
    NodeIdText,
    RemovalProof,
    Timestamp,
    Tombstone,
)
from backend.components.cluster.members import Membership
from backend.components.cluster.messages import Cert, Message, Name, Port
from backend.protocol.types.base import NodeId

ROSTER_PATH = "/v1/cluster/roster"
REMOVE_PATH = "/v1/cluster/members/remove"
MAX_ROSTER_BYTES = 256 * 1024
MAX_ENDORSEMENTS = 4  # per entry on the wire: the first one it was admitted by, the newest
MAX_NAME_LENGTH = 64


class RosterEntry(Message, frozen=True, kw_only=True):
    """One member as the sender knows it."""

    node_id: NodeIdText
    cert_der: Cert
    address: Annotated[str, msgspec.Meta(max_length=256)]
    node_port: Port
    endorsements: Annotated[list[Endorsement], msgspec.Meta(min_length=1, max_length=8)]


class Roster(Message, frozen=True, kw_only=True):
    """``POST /v1/cluster/roster``, both ways: the sender's members and removal proofs."""

    cluster_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    cluster_name: Name
    cluster_name_at: Timestamp = 0.0
    node_port: Port  # where the sender's node API listens
    entries: Annotated[list[RosterEntry], msgspec.Meta(max_length=256)] = msgspec.field(
        default_factory=list
    )
    tombstones: Annotated[list[Tombstone], msgspec.Meta(max_length=1024)] = msgspec.field(
        default_factory=list
    )


class RemovalNotice(Message, frozen=True, kw_only=True):
    """``POST /v1/cluster/members/remove``: a member was removed (or left)."""

    proof: RemovalProof


class RemovalAnswer(Message, frozen=True, kw_only=True):
    """The receiver ``left`` (it was the one removed), tombstoned it, or ``known`` already."""

    state: Literal["left", "removed", "known"]


class Self(msgspec.Struct, frozen=True):
    """This node, as a merge needs it."""

    node_id: NodeId
    fingerprint: str
    cert_der: bytes


def cluster_name(text: str) -> str:
    """``text`` as a cluster name: 1-64 printable characters; ``ValueError`` otherwise."""
    name = text.strip()
    if not 1 <= len(name) <= MAX_NAME_LENGTH or not name.isprintable():
        raise ValueError(f"a cluster name is 1-{MAX_NAME_LENGTH} printable characters")
    return name


def roster_of(membership: Membership, node_port: int) -> Roster:
    """What this node tells other members (its trusted members and every proof it holds)."""
    assert membership.cluster_id is not None, "a roster exists only inside a cluster"
    entries = [
        RosterEntry(
            node_id=member.node_id,
            cert_der=member.cert_der,
            address=member.address,
            node_port=member.node_port,
            endorsements=_on_the_wire(member.endorsements),
        )
        for member in membership.trusted()
        if member.endorsements and member.fingerprint not in membership.removed
    ]
    return Roster(
        cluster_id=membership.cluster_id,
        cluster_name=membership.cluster_name,
        cluster_name_at=membership.cluster_name_at,
        node_port=node_port,
        entries=entries,
        # What this node knows of the removed node stays here; the remover's voucher travels.
        tombstones=[
            Tombstone(proof=t.proof, remover=t.remover) for t in membership.tombstones.values()
        ],
    )


def _on_the_wire(endorsements: tuple[Endorsement, ...]) -> list[Endorsement]:
    if len(endorsements) <= MAX_ENDORSEMENTS:
        return list(endorsements)
    return [endorsements[0], *endorsements[-(MAX_ENDORSEMENTS - 1) :]]
