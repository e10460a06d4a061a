"""The joiner's side of the cluster service: the received invites, the join window, and
``accept``, which runs the pairing (``joiner.run_pairing``) and commits the cluster it joined.

One pairing at a time: while an accept runs, or while this node's own invite is open, new
invites are answered ``busy`` and another accept is refused. Once an accepted invite pairs, the
join window closes and the other received invites end.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from backend.common.certificates import NodeCredentials
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.cluster import peer_client
from backend.components.cluster.incoming import IncomingInvites
from backend.components.cluster.joiner import Ended, Joined, run_pairing
from backend.components.cluster.members import Members, new_cluster_id
from backend.components.cluster.roster_keeper import RosterKeeper
from backend.protocol import errors
from backend.protocol.types.base import InviteId
from backend.protocol.types.cluster import Invite

OWN_INVITE_OPEN = (
    "this computer already has an open invite; finish or cancel it first (one pairing at a time)"
)


class JoinerParts(msgspec.Struct, frozen=True):
    """What the joiner's side uses of its service: identity, membership and notifications."""

    credentials: NodeCredentials
    members: Members
    roster: RosterKeeper
    own_facts: Callable[[], m.SealedFacts]
    trust_changed: Callable[[], None]
    outgoing_open: Callable[[], bool]  # this node's own invite is open


class Joining:
    """Owns the received invites (``incoming``, with the join window) and the accept in flight."""

    def __init__(self, incoming: IncomingInvites, parts: JoinerParts) -> None:
        self.incoming = incoming
        self._parts = parts
        self.running = False  # an accept is under way

    def handle_offer(self, offer: m.InviteOffer, address: str) -> m.OfferAnswer:
        """Another computer invites this one (public route): hold it and tell the app."""
        busy = self.running or self._parts.outgoing_open()
        return self.incoming.offer(offer, address, self._parts.members.current, busy=busy)

    async def accept(self, invite_id: InviteId, pin: str) -> Invite:
        """The user typed the PIN for an invite this computer received."""
        try:
            pin = pc.validate_pin(pin)
        except ValueError:
            raise errors.InvalidParams(
                "the PIN is six digits (0-9), as shown on the other computer"
            ) from None
        held = self.incoming.pending(invite_id)
        if self.running or self._parts.outgoing_open():
            raise errors.Conflict(OWN_INVITE_OPEN)
        self.running = True
        try:
            ended = await self._join(invite_id, held.offer, held.address, pin)
        finally:
            self.running = False
        if ended.state == "paired":
            self.incoming.close_window()
            self.incoming.end_others(invite_id, f"this computer joined {held.offer.name}'s cluster")
        return ended

    async def _join(
        self, invite_id: InviteId, offer: m.InviteOffer, address: str, pin: str
    ) -> Invite:
        parts = self._parts
        try:
            result = await run_pairing(offer, address, pin, parts.credentials, parts.own_facts())
        except peer_client.PeerUnreachable as exc:
            return self.incoming.end(invite_id, "failed", f"{offer.name} stopped answering: {exc}")
        if isinstance(result, Ended):
            return self.incoming.end(invite_id, result.state, result.reason)
        own_cluster = parts.members.current.cluster_id
        if own_cluster is not None and result.inviter.cluster_id != own_cluster:
            return self.incoming.end(invite_id, "rejected")  # the tag matched, the box did not
        return await self._commit(invite_id, offer, address, result)

    async def _commit(
        self, invite_id: InviteId, offer: m.InviteOffer, address: str, joined: Joined
    ) -> Invite:
        parts = self._parts
        inviter = joined.inviter
        cluster_id = inviter.cluster_id or new_cluster_id()
        member = parts.roster.paired_member(inviter, address, cluster_id, provisional=False)
        await parts.members.add(member, cluster_id=cluster_id, cluster_name=inviter.cluster_name)
        parts.trust_changed()
        context = peer_client.mutual_context(parts.credentials, inviter.cert_der)
        hello = m.Hello(invite_id=offer.invite_id)
        try:
            done = await peer_client.post(
                address, offer.node_port, m.HELLO_PATH, hello, context, m.Outcome
            )
        except peer_client.PeerUnreachable as exc:
            done = m.Outcome(state="failed", reason=str(exc))
        if done.state != "paired":
            await parts.members.undo_join(member.node_id)  # as we were before the invite
            parts.trust_changed()
            return self.incoming.end(invite_id, "failed", done.reason)
        parts.roster.request_push()
        return self.incoming.end(invite_id, "paired")

    def decline(self, invite_id: InviteId) -> Invite:
        """Decline a received invite; the inviter is not told (that would tell whoever sent it
        that the user is there): its invite expires or is canceled."""
        self.incoming.pending(invite_id)
        return self.incoming.end(invite_id, "declined")
