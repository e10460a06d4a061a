"""The inviter's side of pairing (the node that shows the PIN; the CPace responder).

One outgoing invite at a time. The PIN lives only in the ``Outgoing`` record, in memory. The
joiner gets exactly one CPace run per invite: the run is counted when it starts, and a wrong
confirmation ends the invite.
"""

from __future__ import annotations

import msgspec

from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.cluster.pake import CPaceError, CPaceRun, Role
from backend.protocol.types.cluster import Invite


class Outgoing(msgspec.Struct):
    """An invite this node sent, with its PIN and the CPace run it allows."""

    invite: Invite
    pin: str
    address: str
    port: int
    run: CPaceRun | None = None
    keys: pc.SessionKeys | None = None
    started: bool = False
    confirmed: bool = False
    joiner: m.SealedFacts | None = None
    joiner_fingerprint: str = ""
    cluster_id: str = ""  # the cluster the joiner is told it joins (founded now if none)


class ProtocolViolation(Exception):
    """The joiner sent a message out of order or one that does not check out (a 400)."""


def answer_start(
    outgoing: Outgoing, start: m.Start, credentials: NodeCredentials, own_ad: bytes
) -> m.StartAnswer:
    """The joiner's one run begins: answer with our share (the attempt is used up now)."""
    if outgoing.started:
        raise ProtocolViolation("this invite's one pairing attempt was already made")
    outgoing.started = True  # counted before any computation: an abandoned run costs a try
    invited = outgoing.invite.peer_fingerprint
    ci = pc.channel_identifier(bytes.fromhex(start.invite_id), credentials.cert_der, invited)
    run = CPaceRun(Role.RESPONDER, pc.password_related_string(outgoing.pin), ci, start.sid, own_ad)
    try:
        run.receive(start.share, start.ad)
    except CPaceError as exc:
        raise ProtocolViolation(f"unusable share: {exc}") from None
    outgoing.run = run
    outgoing.joiner_fingerprint = _fingerprint_in(start.ad)
    return m.StartAnswer(state="pending", share=run.share, ad=own_ad)


def names_invited(outgoing: Outgoing, start: m.Start) -> bool:
    """Whether the joiner names the certificate the invite was sent to (the one pinned)."""
    return _fingerprint_in(start.ad) == outgoing.invite.peer_fingerprint


def answer_confirm(outgoing: Outgoing, confirm: m.Confirm) -> bool:
    """Check the joiner's tag; True (and our tag and box ready) when the PINs matched."""
    run = outgoing.run
    if run is None or outgoing.confirmed:
        raise ProtocolViolation("confirm before start, or twice")
    if not run.verify(confirm.tag):
        return False
    outgoing.confirmed = True
    outgoing.keys = pc.session_keys(run.isk)
    return True


def sealed_answer(outgoing: Outgoing, facts: m.SealedFacts) -> m.ConfirmAnswer:
    """Our tag and our facts sealed for the joiner."""
    assert outgoing.run is not None and outgoing.keys is not None
    box = pc.seal(outgoing.keys.k_ab, m.encode_facts(facts), outgoing.invite.id.encode())
    return m.ConfirmAnswer(state="pending", tag=outgoing.run.tag(), box=box)


def open_finish(outgoing: Outgoing, finish: m.Finish) -> m.SealedFacts:
    """The joiner's sealed facts, checked against what it claimed when the run started."""
    if not outgoing.confirmed or outgoing.keys is None:
        raise ProtocolViolation("finish before a confirmed run")
    try:
        plain = pc.open_box(outgoing.keys.k_ba, finish.box, outgoing.invite.id.encode())
        facts = m.decode_facts(plain)
    except (pc.BoxError, ValueError) as exc:
        raise ProtocolViolation(f"the joiner's box does not open: {exc}") from None
    if fingerprint_of(facts.cert_der) != outgoing.joiner_fingerprint:
        raise ProtocolViolation("the joiner's certificate is not the one it named")
    if facts.node_id != outgoing.invite.peer_node_id:
        raise ProtocolViolation("the joiner is not the node that was invited")
    outgoing.joiner = facts
    return facts


def _fingerprint_in(ad: bytes) -> str:
    try:
        return m.decode_ad(ad).fingerprint
    except ValueError as exc:
        raise ProtocolViolation(f"unreadable associated data: {exc}") from None
