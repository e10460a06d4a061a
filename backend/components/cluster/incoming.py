"""Invites this node received, held in memory until accepted, declined, canceled or expired.

The joiner's bookkeeping only: ``ClusterService`` runs the pairing itself (``accept``). An
invite is refused at once when it comes from this node, repeats one already held, comes from
another cluster than this node's, or arrives while a pairing is open (``busy``).
"""

from __future__ import annotations

from collections.abc import Callable

from backend.common.certificates import fingerprint_of
from backend.components.cluster import invites as rules
from backend.components.cluster import messages as m
from backend.components.cluster.members import Membership
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.cluster import Invite, InviteState

# An ended invite is forgotten this long after its expiry time (screens show how it ended).
KEEP_S = 600.0

Held = tuple[Invite, m.InviteOffer, str]  # the invite, the offer as received, its address


class IncomingInvites:
    """Owns the received invites; ``publish`` is called with every one that appears or ends."""

    def __init__(self, *, node_id: NodeId, clock: Clock, publish: Callable[[Invite], None]) -> None:
        self._node_id = node_id
        self._clock = clock
        self._publish = publish
        self._held: dict[InviteId, Held] = {}

    def invites(self) -> list[Invite]:
        """Every received invite (open and ended)."""
        return [invite for invite, _, _ in self._held.values()]

    def offer(
        self, offer: m.InviteOffer, address: str, membership: Membership, *, busy: bool
    ) -> m.OfferAnswer:
        """Hold ``offer`` (from ``address``) and tell the app, or say why not."""
        now = self._clock.wall()
        refusal = self._refusal(offer, membership, busy=busy)
        if refusal is not None:
            return m.OfferAnswer(state=refusal, reason=rules.REASONS[refusal])
        invite = Invite(
            id=InviteId(offer.invite_id),
            direction="incoming",
            peer_node_id=offer.node_id,
            peer_name=offer.name,
            peer_address=address,
            peer_fingerprint=fingerprint_of(offer.cert_der),
            created_at=now,
            expires_at=now + min(offer.expires_in_s, rules.INVITE_TTL_S),
            state="pending",
        )
        self._held[invite.id] = (invite, offer, address)
        self._publish(invite)
        return m.OfferAnswer(state="pending")

    def _refusal(
        self, offer: m.InviteOffer, membership: Membership, *, busy: bool
    ) -> InviteState | None:
        if offer.node_id == self._node_id or offer.invite_id in self._held:
            return "failed"
        if membership.clustered and offer.cluster_id != membership.cluster_id:
            return "rejected"
        return "busy" if busy else None

    def pending(self, invite_id: InviteId) -> Held:
        """The open invite ``invite_id`` (``NotFound``, or ``Conflict`` once it is over)."""
        found = self._held.get(invite_id)
        if found is None:
            raise errors.NotFound(f"no invite {invite_id} was received by this computer")
        if found[0].state != "pending":
            raise errors.Conflict(f"that invite is over: {found[0].reason or found[0].state}")
        return found

    def end(self, invite_id: InviteId, state: InviteState, reason: str | None = None) -> Invite:
        """End ``invite_id`` as ``state`` (an invite that already ended keeps its outcome)."""
        invite, offer, address = self._held[invite_id]
        ended = rules.finish(invite, state, reason)
        if ended is not invite:
            self._held[invite_id] = (ended, offer, address)
            self._publish(ended)
        return ended

    def cancel(self, end: m.InviteEnd) -> m.Outcome:
        """The inviter canceled (public route)."""
        if end.invite_id in self._held:
            self.end(InviteId(end.invite_id), "canceled")
        return m.Outcome(state="canceled")

    def expire(self) -> None:
        """End the open invites whose time is up."""
        now = self._clock.wall()
        for invite, _, _ in list(self._held.values()):
            if invite.state == "pending" and now >= invite.expires_at:
                self.end(invite.id, "expired")
            elif invite.state != "pending" and now >= invite.expires_at + KEEP_S:
                del self._held[invite.id]  # ended long ago: status lists open invites
