"""Invites this node received, held in memory until accepted, declined, canceled or expired.

The joiner's bookkeeping only: ``ClusterService`` runs the pairing itself (``accept``). An
invite is taken only while the join window is open (``admission``); otherwise it is answered
``not-accepting`` and nobody sees it. It is refused at once when it comes from this node,
repeats one already held, comes from another cluster than this node's, or arrives while this
node's own invite is open (``busy``). Several may be open together: the user picks one.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

import msgspec
from msgspec.structs import replace

from backend.common.certificates import fingerprint_of
from backend.components.cluster import admission
from backend.components.cluster import invites as rules
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.cluster.members import Membership
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.cluster import Invite, InviteState, JoinWindow


class Held(msgspec.Struct, frozen=True):
    """A received invite, the offer as received, its sender's address, and when it ended."""

    invite: Invite
    offer: m.InviteOffer
    address: str
    ended_at: float | None = None


class IncomingInvites:
    """Owns the received invites and the join window; ``publish`` is called with every invite
    that appears or ends, ``window_changed`` whenever the window opens or closes."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        clock: Clock,
        publish: Callable[[Invite], None],
        window_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._node_id = node_id
        self._clock = clock
        self._publish = publish
        self._window_changed = window_changed
        self._held: dict[InviteId, Held] = {}
        self._sources: dict[str, tuple[float, ...]] = {}
        self._window: JoinWindow | None = None

    def quiet(self) -> bool:
        """Whether nothing is held and the join window is closed: ``expire`` has no work."""
        return not self._held and self._window is None

    def invites(self) -> list[Invite]:
        """Every received invite (open and recently ended)."""
        return [held.invite for held in self._held.values()]

    @property
    def window(self) -> JoinWindow | None:
        """The join window while it is open."""
        return self._window if admission.is_open(self._window, self._clock.wall()) else None

    def open_window(self, minutes: float) -> JoinWindow:
        """Accept invites for ``minutes`` from now (``InvalidParams`` outside 1-15)."""
        try:
            self._window = admission.open_window(self._clock.wall(), minutes)
        except ValueError as exc:
            raise errors.InvalidParams(str(exc)) from None
        self._window_changed()
        return self._window

    def close_window(self) -> None:
        """Stop accepting invites (the ones already held stay open until they end)."""
        if self._window is not None:
            self._window = None
            self._window_changed()

    def offer(
        self, offer: m.InviteOffer, address: str, membership: Membership, *, busy: bool
    ) -> m.OfferAnswer:
        """Hold ``offer`` (from ``address``) and tell the app, or say why not."""
        now = self._clock.wall()
        if not admission.is_open(self._window, now):
            return m.OfferAnswer(state="not-accepting", reason=admission.NOT_ACCEPTING)
        refused = self._admit(address, now) or self._refusal(offer, membership, busy=busy)
        if refused is not None:
            return refused
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
        self._held[invite.id] = Held(invite, offer, address)
        self._publish(invite)
        return m.OfferAnswer(state="pending")

    def _admit(self, address: str, now: float) -> m.OfferAnswer | None:
        recent = admission.admitted(self._sources.get(address, ()), now)
        if recent is None:
            return m.OfferAnswer(state="busy", reason=admission.TOO_MANY_FROM_SOURCE)
        self._sources[address] = recent
        if len(self._sources) > admission.MAX_SOURCES:
            self._sources = admission.pruned_sources(self._sources, now)
        return None

    def _refusal(
        self, offer: m.InviteOffer, membership: Membership, *, busy: bool
    ) -> m.OfferAnswer | None:
        state: InviteState | None = None
        if offer.node_id == self._node_id or offer.invite_id in self._held:
            state = "failed"
        elif membership.clustered and not _same_cluster(offer, membership):
            state = "rejected"
        elif busy:
            state = "busy"
        elif not self._room():
            return m.OfferAnswer(state="busy", reason=admission.TOO_MANY_HELD)
        return None if state is None else m.OfferAnswer(state=state, reason=rules.REASONS[state])

    def _room(self) -> bool:
        """Whether one more invite fits under the cap, dropping the oldest ended ones for it."""
        ended = sorted(
            (held for held in self._held.values() if held.ended_at is not None),
            key=lambda held: held.ended_at or 0.0,
        )
        while len(self._held) >= admission.MAX_HELD and ended:
            del self._held[ended.pop(0).invite.id]
        return len(self._held) < admission.MAX_HELD

    def pending(self, invite_id: InviteId) -> Held:
        """The open invite ``invite_id`` (``NotFound``, or ``Conflict`` once it is over)."""
        found = self._held.get(invite_id)
        if found is None:
            raise errors.NotFound(f"no invite {invite_id} was received by this computer")
        if found.invite.state != "pending":
            raise errors.Conflict(
                f"that invite is over: {found.invite.reason or found.invite.state}"
            )
        return found

    def end(self, invite_id: InviteId, state: InviteState, reason: str | None = None) -> Invite:
        """End ``invite_id`` as ``state`` (an invite that already ended keeps its outcome)."""
        held = self._held[invite_id]
        ended = rules.finish(held.invite, state, reason)
        if ended is not held.invite:
            self._held[invite_id] = replace(held, invite=ended, ended_at=self._clock.wall())
            self._publish(ended)
        return ended

    def end_others(self, kept: InviteId, reason: str) -> None:
        """End every open invite but ``kept`` as declined (this node joined a cluster)."""
        for held in list(self._held.values()):
            if held.invite.id != kept and held.invite.state == "pending":
                self.end(held.invite.id, "declined", reason)

    def cancel(self, end: m.InviteEnd) -> m.Outcome:
        """The inviter canceled (public route)."""
        if end.invite_id in self._held:
            self.end(InviteId(end.invite_id), "canceled")
        return m.Outcome(state="canceled")

    def expire(self) -> None:
        """End the open invites whose time is up; close the window when its time is up."""
        now = self._clock.wall()
        for held in list(self._held.values()):
            if held.invite.state == "pending" and now >= held.invite.expires_at:
                self.end(held.invite.id, "expired")
            elif held.ended_at is not None and now >= held.ended_at + admission.ENDED_KEEP_S:
                del self._held[held.invite.id]  # ended a while ago: status lists open invites
        if self._window is not None and not admission.is_open(self._window, now):
            self.close_window()


def _same_cluster(offer: m.InviteOffer, membership: Membership) -> bool:
    if offer.cluster_tag is None or membership.cluster_id is None:
        return False
    expected = pc.cluster_tag(membership.cluster_id, bytes.fromhex(offer.invite_id), offer.cert_der)
    return hmac.compare_digest(offer.cluster_tag, expected)
