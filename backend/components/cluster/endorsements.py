"""Signed statements members make about each other: endorsements and removal proofs.

An **endorsement** is X vouching for Y: "Y (this node id, this certificate, this name) is a
member of this cluster", signed with X's node key. X signs one for every node it pairs with
by PIN, and for every node it pins through another member's endorsement, so an entry stays
verifiable after whoever first introduced it is removed. A **removal proof** is X saying "the
node with this certificate is out", signed the same way; X may name itself (it left). Members
keep and pass on a proof as a ``Tombstone``, with a ``Voucher`` for its remover.

Both sign a canonical byte string: the length-value concatenation (``lv_cat``, as in CPace) of
a domain label, the cluster id, and every field, UTF-8 text and times as IEEE 754 binary64
big-endian (a float survives JSON exactly, so both sides sign the same bytes). The signature is
ECDSA P-256 with SHA-256 (DER), by the key of the node's certificate; the cluster id is not in
the messages because the verifier uses its own, so a statement never carries over to another
cluster.
"""

from __future__ import annotations

import functools
import ssl
import struct
from typing import Annotated

import msgspec
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from backend.common.certificates import NodeCredentials
from backend.components.cluster.messages import Cert, Message, Name
from backend.components.cluster.pake import lv_cat
from backend.protocol.types.base import NodeId

ENDORSEMENT_LABEL = b"pair-endorsement-v1"
REMOVAL_LABEL = b"pair-removal-v1"

Fingerprint = Annotated[str, msgspec.Meta(pattern="^sha256:[0-9a-f]{64}$")]
NodeIdText = Annotated[NodeId, msgspec.Meta(min_length=1, max_length=64)]
Signature = Annotated[bytes, msgspec.Meta(min_length=8, max_length=80)]
# Unix seconds, finite and in a sane range (a JSON number could be anything).
Timestamp = Annotated[float, msgspec.Meta(ge=0, le=1e11)]


class Endorsement(Message, frozen=True, kw_only=True):
    """``endorser`` vouches that ``node_id`` with certificate ``fingerprint`` is a member."""

    node_id: NodeIdText
    fingerprint: Fingerprint
    name: Name
    issued_at: Timestamp
    endorser: NodeIdText
    signature: Signature


class RemovalProof(Message, frozen=True, kw_only=True):
    """``remover`` took the node with certificate ``fingerprint`` out of the cluster.

    ``remover == node_id``: the node left by itself (``cluster:leave``).
    """

    node_id: NodeIdText
    fingerprint: Fingerprint
    remover: NodeIdText
    removed_at: Timestamp
    signature: Signature

    @property
    def left(self) -> bool:
        """The node removed itself: a later pairing by PIN may bring it back."""
        return self.remover == self.node_id


class Voucher(Message, frozen=True, kw_only=True):
    """A node's certificate and the endorsements that make it a member (or one, once)."""

    node_id: NodeIdText
    cert_der: Cert
    endorsements: Annotated[list[Endorsement], msgspec.Meta(max_length=8)] = msgspec.field(
        default_factory=list
    )


class Tombstone(Message, frozen=True, kw_only=True):
    """A removal proof as members keep and pass it on.

    ``remover`` vouches for the remover, so a node that never knew it (or has removed it since)
    can still check the signature: without it, whether a proof counts would depend on the order
    rosters arrive in, and members could disagree on who is in. ``removed`` is the removed
    member as this node knew it (kept locally, not sent).
    """

    proof: RemovalProof
    remover: Voucher | None = None
    removed: Voucher | None = None


def endorse(
    credentials: NodeCredentials,
    endorser: NodeId,
    cluster_id: str,
    *,
    node_id: NodeId,
    fingerprint: str,
    name: str,
    issued_at: float,
) -> Endorsement:
    """This node's signed endorsement of ``node_id``."""
    unsigned = Endorsement(
        node_id=node_id,
        fingerprint=fingerprint,
        name=name,
        issued_at=issued_at,
        endorser=endorser,
        signature=b"\0" * 8,
    )
    signature = _sign(credentials, _endorsement_bytes(unsigned, cluster_id))
    return msgspec.structs.replace(unsigned, signature=signature)


def endorsement_holds(endorsement: Endorsement, cluster_id: str, endorser_cert: bytes) -> bool:
    """Whether ``endorsement`` was signed for ``cluster_id`` by the key of ``endorser_cert``."""
    return _verify(
        endorser_cert, endorsement.signature, _endorsement_bytes(endorsement, cluster_id)
    )


def prove_removal(
    credentials: NodeCredentials,
    remover: NodeId,
    cluster_id: str,
    *,
    node_id: NodeId,
    fingerprint: str,
    removed_at: float,
) -> RemovalProof:
    """This node's signed proof that ``node_id`` (``fingerprint``) is out of the cluster."""
    unsigned = RemovalProof(
        node_id=node_id,
        fingerprint=fingerprint,
        remover=remover,
        removed_at=removed_at,
        signature=b"\0" * 8,
    )
    signature = _sign(credentials, _removal_bytes(unsigned, cluster_id))
    return msgspec.structs.replace(unsigned, signature=signature)


def removal_holds(proof: RemovalProof, cluster_id: str, remover_cert: bytes) -> bool:
    """Whether ``proof`` was signed for ``cluster_id`` by the key of ``remover_cert``."""
    return _verify(remover_cert, proof.signature, _removal_bytes(proof, cluster_id))


def usable_certificate(cert_der: bytes, node_id: NodeId) -> bool:
    """Whether ``cert_der`` is a node certificate naming ``node_id`` that TLS can pin.

    Checked before a certificate learnt from another member is pinned: a certificate OpenSSL
    cannot load would break the pins of every peer, not just this one.
    """
    try:
        certificate = x509.load_der_x509_certificate(cert_der)
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        key = certificate.public_key()
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=ssl.DER_cert_to_PEM_cert(cert_der)
        )
    except (ValueError, ssl.SSLError):
        return False
    named = names[0].value if names else None
    return (
        named == node_id
        and isinstance(key, ec.EllipticCurvePublicKey)
        and isinstance(key.curve, ec.SECP256R1)
    )


def _endorsement_bytes(endorsement: Endorsement, cluster_id: str) -> bytes:
    return lv_cat(
        ENDORSEMENT_LABEL,
        cluster_id.encode(),
        endorsement.node_id.encode(),
        endorsement.fingerprint.encode(),
        endorsement.name.encode(),
        struct.pack(">d", endorsement.issued_at),
        endorsement.endorser.encode(),
    )


def _removal_bytes(proof: RemovalProof, cluster_id: str) -> bytes:
    return lv_cat(
        REMOVAL_LABEL,
        cluster_id.encode(),
        proof.node_id.encode(),
        proof.fingerprint.encode(),
        proof.remover.encode(),
        struct.pack(">d", proof.removed_at),
    )


def _sign(credentials: NodeCredentials, data: bytes) -> bytes:
    return credentials.private_key.sign(data, ec.ECDSA(hashes.SHA256()))


def _verify(cert_der: bytes, signature: bytes, data: bytes) -> bool:
    key = _public_key(cert_der)
    if key is None:
        return False
    try:
        key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _public_key(cert_der: bytes) -> ec.EllipticCurvePublicKey | None:
    # Members' certificates are verified against again and again; parsing each time is waste.
    try:
        key = x509.load_der_x509_certificate(cert_der).public_key()
    except ValueError:
        return None
    return key if isinstance(key, ec.EllipticCurvePublicKey) else None
