"""The pure rules that merge a roster (or one removal proof) into the membership: a 2P-set union.

- An entry is pinned when one of its endorsements names its node id and certificate and
  verifies against a certificate this node already trusts, repeated until nothing new verifies
  (a chain A→B→C in one roster lands in one merge). Never for a node id already known (no
  re-pin of another certificate), a certificate already pinned, this node itself, or a
  tombstoned certificate; and only for a certificate TLS can pin.
- A removal proof counts when its signature holds for its remover's certificate, found among
  the members trusted now, those this node trusted once (tombstoned since), and the vouchers
  in the roster that verify from those. A remover removed since still counts: whether a proof
  counts must not depend on the order rosters arrive in, or members would disagree on who is
  in. A removal by another member is permanent. A node's own leave blocks only endorsements
  issued before it, so a later pairing by PIN brings it back.
- The cluster's name follows the newest rename (time, then name, so every node picks the same).

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import msgspec

from backend.common.certificates import fingerprint_of
from backend.components.cluster.endorsements import (
    Endorsement,
    RemovalProof,
    Tombstone,
    Voucher,
    endorsement_holds,
    removal_holds,
    usable_certificate,
)
from backend.components.cluster.members import Changes, Member, Membership
from backend.components.cluster.roster import Roster, RosterEntry, Self, cluster_name
from backend.protocol.types.base import NodeId

Blocks = dict[str, float | None]  # tombstoned fingerprint → None (for good) or its leave's time


class RosterRefused(Exception):
    """The roster is not for this node's cluster, or the proof is not a member's."""


class _Vouched(Protocol):
    """A roster entry or a voucher: a node's certificate and its endorsements."""

    @property
    def node_id(self) -> NodeId: ...
    @property
    def cert_der(self) -> bytes: ...
    @property
    def endorsements(self) -> list[Endorsement]: ...


class Merge(msgspec.Struct, frozen=True):
    """What a roster changes here; ``removed_self``: a member removed this node."""

    changes: Changes
    removed_self: RemovalProof | None = None
    newly_removed: tuple[Member, ...] = ()  # members pinned here until this merge removed them
    refused: tuple[NodeId, ...] = ()  # entries that did not verify, for the log


def merge(
    membership: Membership,
    roster: Roster,
    own: Self,
    *,
    now: float,
    sender_address: tuple[NodeId, str, int] | None = None,
) -> Merge:
    """What ``roster`` (from a trusted member) changes in ``membership``."""
    cluster_id = membership.cluster_id
    if cluster_id is None or roster.cluster_id != cluster_id:
        raise RosterRefused(f"the roster is for cluster {roster.cluster_id}, not this one")
    trusted = _trusted_certs(membership, own)
    vouchers: list[_Vouched] = [*roster.entries]
    vouchers += [t.remover for t in roster.tombstones if t.remover is not None]
    signers = _vouched_certs(cluster_id, {**_once_trusted(membership), **trusted}, vouchers)
    tombstones, removed_self = _new_tombstones(membership, roster.tombstones, own, signers)
    still_trusted = {k: v for k, v in trusted.items() if fingerprint_of(v) not in tombstones}
    candidates = _candidates(membership, roster, own)
    blocks = _blocks(membership, tombstones)
    admitted = _fixpoint(cluster_id, still_trusted, candidates, blocks)
    pinned = [_member(entry, endorsement, now) for entry, endorsement in admitted.values()]
    readmitted = {member.fingerprint for member in pinned}
    kept = [
        t for t in tombstones.values() if not (t.proof.left and t.proof.fingerprint in readmitted)
    ]
    changes = Changes(
        pinned=pinned,
        tombstones=kept,
        name=_newer_name(membership, roster),
        addresses=_moved(membership, sender_address),
    )
    refused = tuple(e.node_id for e in candidates if e.node_id not in admitted)
    return Merge(changes, removed_self, _gone(membership, kept), refused)


def merge_removal(membership: Membership, proof: RemovalProof, own: Self) -> Merge:
    """What one removal proof (``POST /v1/cluster/members/remove``) changes here; its remover
    must be trusted here and the signature hold (else ``RosterRefused``)."""
    cluster_id = membership.cluster_id
    signers = _trusted_certs(membership, own)
    signer = signers.get(proof.remover)
    if cluster_id is None or signer is None or not removal_holds(proof, cluster_id, signer):
        raise RosterRefused("the removal proof is not signed by a member of this cluster")
    tombstones, removed_self = _new_tombstones(membership, [Tombstone(proof=proof)], own, signers)
    kept = list(tombstones.values())
    return Merge(Changes(tombstones=kept), removed_self, _gone(membership, kept))


def _trusted_certs(membership: Membership, own: Self) -> dict[NodeId, bytes]:
    trusted = {
        member.node_id: member.cert_der
        for member in membership.trusted()
        if member.fingerprint not in membership.removed
    }
    trusted[own.node_id] = own.cert_der
    return trusted


def _once_trusted(membership: Membership) -> dict[NodeId, bytes]:
    """Certificates of members removed since, and of removers this node verified before."""
    found: dict[NodeId, bytes] = {}
    for tombstone in membership.tombstones.values():
        for voucher in (tombstone.removed, tombstone.remover):
            if voucher is not None:
                found.setdefault(voucher.node_id, voucher.cert_der)
    return found


def _vouched_certs(
    cluster_id: str, known: dict[NodeId, bytes], items: Sequence[_Vouched]
) -> dict[NodeId, bytes]:
    """``known`` and every certificate in ``items`` endorsed from it, transitively; for checking
    signatures only (nothing here is pinned, tombstones do not matter)."""
    known = dict(known)
    progress = True
    while progress:
        progress = False
        for item in items:
            if item.node_id not in known and _endorsed(cluster_id, item, known, None) is not None:
                known[item.node_id] = item.cert_der
                progress = True
    return known


def _candidates(membership: Membership, roster: Roster, own: Self) -> list[RosterEntry]:
    """Entries naming nodes this one does not know yet, once each."""
    found: dict[NodeId, RosterEntry] = {}
    for entry in roster.entries:
        fingerprint = fingerprint_of(entry.cert_der)
        if (
            entry.node_id in found
            or entry.node_id == own.node_id
            or fingerprint == own.fingerprint
            or entry.node_id in membership.members  # never re-pinned, whatever the certificate
            or membership.with_fingerprint(fingerprint) is not None
        ):
            continue
        found[entry.node_id] = entry
    return list(found.values())


def _blocks(membership: Membership, new: dict[str, Tombstone]) -> Blocks:
    """Tombstoned fingerprints: ``None`` for good, or the time of the node's own leave (only
    endorsements issued after it may bring it back)."""
    blocks: Blocks = {}
    for fingerprint in membership.removed | new.keys():
        held = [
            t.proof for t in (membership.tombstones.get(fingerprint), new.get(fingerprint)) if t
        ]
        if fingerprint in membership.removed and fingerprint not in membership.tombstones:
            held = []  # a tombstone without its proof (written before proofs were kept)
        lefts = [p.removed_at for p in held if p.left]
        blocks[fingerprint] = max(lefts) if held and len(lefts) == len(held) else None
    return blocks


def _fixpoint(
    cluster_id: str,
    trusted: dict[NodeId, bytes],
    candidates: list[RosterEntry],
    blocks: Blocks,
) -> dict[NodeId, tuple[RosterEntry, Endorsement]]:
    """Entries whose endorsement verifies against a trusted certificate, where each admitted
    entry's certificate is trusted for the next ones, until nothing more verifies."""
    known = dict(trusted)
    admitted: dict[NodeId, tuple[RosterEntry, Endorsement]] = {}
    progress = True
    while progress:
        progress = False
        for entry in candidates:
            if entry.node_id in admitted:
                continue
            fingerprint = fingerprint_of(entry.cert_der)
            if fingerprint in blocks and blocks[fingerprint] is None:
                continue
            endorsement = _endorsed(cluster_id, entry, known, blocks.get(fingerprint))
            if endorsement is not None and usable_certificate(entry.cert_der, entry.node_id):
                admitted[entry.node_id] = (entry, endorsement)
                known[entry.node_id] = entry.cert_der
                progress = True
    return admitted


def _endorsed(
    cluster_id: str, item: _Vouched, known: dict[NodeId, bytes], after: float | None
) -> Endorsement | None:
    """The first endorsement of ``item`` (issued after ``after``) that a known node signed."""
    fingerprint = fingerprint_of(item.cert_der)
    for endorsement in item.endorsements:
        endorser_cert = known.get(endorsement.endorser)
        if (
            endorser_cert is not None
            and endorsement.node_id == item.node_id
            and endorsement.fingerprint == fingerprint
            and (after is None or endorsement.issued_at > after)
            and endorsement_holds(endorsement, cluster_id, endorser_cert)
        ):
            return endorsement
    return None


def _new_tombstones(
    membership: Membership,
    received: Iterable[Tombstone],
    own: Self,
    signers: dict[NodeId, bytes],
) -> tuple[dict[str, Tombstone], RemovalProof | None]:
    assert membership.cluster_id is not None
    found: dict[str, Tombstone] = {}
    removed_self: RemovalProof | None = None
    for tombstone in received:
        proof = tombstone.proof
        kept = found.get(proof.fingerprint) or membership.tombstones.get(proof.fingerprint)
        if kept is not None and (not kept.proof.left or proof.left):
            continue  # nothing new: already removed for good, or already known to have left
        signer = signers.get(proof.remover)
        if signer is None or not removal_holds(proof, membership.cluster_id, signer):
            continue
        if proof.fingerprint == own.fingerprint:
            # Our own leave, seen again after we rejoined, is history; a removal is not.
            removed_self = removed_self or (None if proof.left else proof)
            continue
        member = membership.with_fingerprint(proof.fingerprint)
        if proof.left and member is not None and member.endorsed_at > proof.removed_at:
            continue  # it left, then paired again: the leave is over
        found[proof.fingerprint] = Tombstone(
            proof=proof,
            remover=_remover(membership, tombstone, signer),
            removed=member.voucher() if member is not None else None,
        )
    return found, removed_self


def _remover(membership: Membership, tombstone: Tombstone, signer: bytes) -> Voucher | None:
    """What this node will pass on to vouch for the remover (``None``: the remover is this
    node, which every receiver of its roster trusts)."""
    member = membership.members.get(tombstone.proof.remover)
    if member is not None:
        return member.voucher()
    voucher = tombstone.remover
    return voucher if voucher is not None and voucher.cert_der == signer else None


def _gone(membership: Membership, tombstones: Iterable[Tombstone]) -> tuple[Member, ...]:
    """Members pinned here that ``tombstones`` remove for good (they should hear it)."""
    return tuple(
        member
        for t in tombstones
        if not t.proof.left
        and (member := membership.with_fingerprint(t.proof.fingerprint)) is not None
    )


def _member(entry: RosterEntry, endorsement: Endorsement, now: float) -> Member:
    return Member(
        node_id=entry.node_id,
        name=endorsement.name,
        cert_der=entry.cert_der,
        fingerprint=endorsement.fingerprint,
        added_by=endorsement.endorser,
        added_at=now,
        address=entry.address,
        node_port=entry.node_port,
        endorsements=(endorsement,),
    )


def _newer_name(membership: Membership, roster: Roster) -> tuple[str, float] | None:
    try:
        name = cluster_name(roster.cluster_name)
    except ValueError:
        return None
    if (roster.cluster_name_at, name) <= (membership.cluster_name_at, membership.cluster_name):
        return None
    return name, roster.cluster_name_at


def _moved(
    membership: Membership, sender_address: tuple[NodeId, str, int] | None
) -> list[tuple[NodeId, str, int]]:
    if sender_address is None:
        return []
    node_id, address, port = sender_address
    member = membership.members.get(node_id)
    if member is None or not address or (member.address, member.node_port) == (address, port):
        return []
    return [sender_address]
