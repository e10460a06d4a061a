"""The pairing exchange's messages on the node API (``/v1/pairing/*``), as strict structs.

Bytes travel as base64 (msgspec's JSON encoding of ``bytes``). Every message names its invite;
sizes are bounded so a malformed or hostile message is refused with a 400, never parsed at
length. The certificates and cluster facts inside the sealed boxes are ``SealedFacts``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import InviteState

INVITE_PATH = "/v1/pairing/invite"
START_PATH = "/v1/pairing/start"
CONFIRM_PATH = "/v1/pairing/confirm"
FINISH_PATH = "/v1/pairing/finish"
CANCEL_PATH = "/v1/pairing/cancel"
HELLO_PATH = "/v1/cluster/hello"

Hex32 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
Hex64 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Share = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
Tag = Annotated[bytes, msgspec.Meta(min_length=64, max_length=64)]
Sid = Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]
Cert = Annotated[bytes, msgspec.Meta(min_length=64, max_length=16_384)]
Box = Annotated[bytes, msgspec.Meta(min_length=16, max_length=32_768)]
Name = Annotated[str, msgspec.Meta(max_length=256)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class Message(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every pairing message: unknown fields are refused."""


class InviteOffer(Message, frozen=True, kw_only=True):
    """A → B: A invites B (A will show the PIN).

    ``cluster_tag`` (``pairing_crypto.cluster_tag``) lets a clustered B refuse an invite from
    another cluster at once; the cluster id itself travels only in the sealed box.
    """

    invite_id: Hex32
    node_id: NodeId
    name: Name
    cert_der: Cert
    node_port: Port
    cluster_tag: Hex64 | None = None
    expires_in_s: Annotated[float, msgspec.Meta(gt=0, le=600)]


class OfferAnswer(Message, frozen=True, kw_only=True):
    """B → A: whether B holds the invite now (``pending``) or why not."""

    state: InviteState
    reason: str | None = None


class Start(Message, frozen=True, kw_only=True):
    """B → A: B's CPace share; ``ad`` names B (node id and certificate fingerprint)."""

    invite_id: Hex32
    sid: Sid
    share: Share
    ad: Annotated[bytes, msgspec.Meta(max_length=512)]


class StartAnswer(Message, frozen=True, kw_only=True):
    """A → B: A's share and associated data (or the invite's end, with ``state``)."""

    state: InviteState
    share: Share | None = None
    ad: Annotated[bytes, msgspec.Meta(max_length=512)] | None = None
    reason: str | None = None


class Confirm(Message, frozen=True, kw_only=True):
    """B → A: B's confirmation tag."""

    invite_id: Hex32
    tag: Tag


class ConfirmAnswer(Message, frozen=True, kw_only=True):
    """A → B: A's tag and its sealed facts, or ``wrong-pin`` (the invite is over)."""

    state: InviteState
    tag: Tag | None = None
    box: Box | None = None
    reason: str | None = None


class Finish(Message, frozen=True, kw_only=True):
    """B → A: B's sealed facts."""

    invite_id: Hex32
    box: Box


class InviteEnd(Message, frozen=True, kw_only=True):
    """A → B: A canceled the invite (B never answers a decline: silence tells nobody that its
    user is there)."""

    invite_id: Hex32


class Outcome(Message, frozen=True, kw_only=True):
    """A plain answer: the invite's state afterwards."""

    state: InviteState
    reason: str | None = None


class SealedFacts(Message, frozen=True, kw_only=True):
    """What each side tells the other only under the PAKE key."""

    node_id: NodeId
    name: Name
    cert_der: Cert
    node_port: Port
    cluster_id: str | None = None
    cluster_name: Name = ""


class Hello(Message, frozen=True, kw_only=True):
    """B → A over mutual TLS after B committed: A may make B's pin final."""

    invite_id: Hex32


class AssociatedData(Message, frozen=True, kw_only=True):
    """A side's CPace associated data (in the transcript): who it says it is."""

    node_id: NodeId
    fingerprint: Annotated[str, msgspec.Meta(pattern="^sha256:[0-9a-f]{64}$")]


def associated_data(node_id: NodeId, fingerprint: str) -> bytes:
    """A side's CPace associated data: its node id and certificate fingerprint."""
    return msgspec.json.encode(AssociatedData(node_id=node_id, fingerprint=fingerprint))


def decode_ad(raw: bytes) -> AssociatedData:
    """The other side's associated data; ``ValueError`` when it is not ours."""
    try:
        return msgspec.json.decode(raw, type=AssociatedData)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(str(exc)) from None


def encode_facts(facts: SealedFacts) -> bytes:
    """``facts`` as the plaintext of a sealed box."""
    return msgspec.json.encode(facts)


def decode_facts(raw: bytes) -> SealedFacts:
    """A box's plaintext; ``ValueError`` when it is not ``SealedFacts``."""
    try:
        return msgspec.json.decode(raw, type=SealedFacts)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(str(exc)) from None
