"""The joiner's side of pairing (the node where the user types the PIN; the CPace initiator).

``run_pairing`` drives the exchange with the inviter and returns what the inviter sealed for us,
or the invite's end. Everything after the first TLS handshake goes over TLS pinned to the
certificate the inviter sent in its invite: a relay with another certificate is refused before a
byte of the exchange is sent, and one that somehow relays the TLS session still cannot pass the
confirmation, because the certificate is part of the CPace channel identifier.
"""

from __future__ import annotations

import secrets

import msgspec

from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.cluster import peer_client
from backend.components.cluster.pake import CPaceError, CPaceRun, Role
from backend.protocol.types.cluster import InviteState


class Joined(msgspec.Struct, frozen=True):
    """The inviter's facts, opened from its box, and the keys of this run."""

    inviter: m.SealedFacts
    keys: pc.SessionKeys


class Ended(msgspec.Struct, frozen=True):
    """The invite ended before pairing (wrong PIN, expired at the inviter, ...)."""

    state: InviteState
    reason: str | None = None


async def run_pairing(
    offer: m.InviteOffer,
    address: str,
    pin: str,
    credentials: NodeCredentials,
    own: m.SealedFacts,
) -> Joined | Ended:
    """Pair with the inviter of ``offer`` at ``address``; raises ``PeerUnreachable``."""
    seen = await peer_client.server_certificate(address, offer.node_port)
    if seen != offer.cert_der:
        return Ended("failed", _substituted(offer, address))
    context = peer_client.pinned_anonymous_context(seen)
    ci = pc.channel_identifier(bytes.fromhex(offer.invite_id), seen, credentials.fingerprint)
    own_ad = m.associated_data(own.node_id, credentials.fingerprint)
    sid = secrets.token_bytes(16)
    run = CPaceRun(Role.INITIATOR, pc.password_related_string(pin), ci, sid, own_ad)

    async def post(path: str, body: m.Message, kind: type[peer_client.T]) -> peer_client.T:
        return await peer_client.post(address, offer.node_port, path, body, context, kind)

    start = m.Start(invite_id=offer.invite_id, sid=sid, share=run.share, ad=own_ad)
    started = await post(m.START_PATH, start, m.StartAnswer)
    if started.state != "pending" or started.share is None or started.ad is None:
        return Ended(started.state if started.state != "pending" else "failed", started.reason)
    if not _names_inviter(started.ad, offer):
        return Ended("failed", "the inviter's answer names another computer")
    try:
        run.receive(started.share, started.ad)
    except CPaceError as exc:
        return Ended("failed", f"the inviter's share is unusable: {exc}")
    confirm = m.Confirm(invite_id=offer.invite_id, tag=run.tag())
    answer = await post(m.CONFIRM_PATH, confirm, m.ConfirmAnswer)
    if answer.state != "pending" or answer.tag is None or answer.box is None:
        return Ended(answer.state if answer.state != "pending" else "failed", answer.reason)
    if not run.verify(answer.tag):
        return Ended("wrong-pin")
    keys = pc.session_keys(run.isk)
    inviter = _open_inviter(keys, answer.box, offer)
    if inviter is None:
        return Ended("failed", "the inviter's sealed facts do not check out")
    box = pc.seal(keys.k_ba, m.encode_facts(own), offer.invite_id.encode())
    done = await post(m.FINISH_PATH, m.Finish(invite_id=offer.invite_id, box=box), m.Outcome)
    if done.state not in ("pending", "paired"):
        return Ended(done.state, done.reason)
    return Joined(inviter, keys)


def _names_inviter(ad: bytes, offer: m.InviteOffer) -> bool:
    try:
        named = m.decode_ad(ad)
    except ValueError:
        return False
    return named.node_id == offer.node_id and named.fingerprint == fingerprint_of(offer.cert_der)


def _open_inviter(keys: pc.SessionKeys, box: bytes, offer: m.InviteOffer) -> m.SealedFacts | None:
    try:
        facts = m.decode_facts(pc.open_box(keys.k_ab, box, offer.invite_id.encode()))
    except (pc.BoxError, ValueError):
        return None
    if facts.cert_der != offer.cert_der or facts.node_id != offer.node_id:
        return None
    return facts


def _substituted(offer: m.InviteOffer, address: str) -> str:
    return (
        f"{offer.name} at {address} answered with another certificate than the one in its "
        "invite (something may be in between); nothing was sent. Check the address and invite "
        "again"
    )
