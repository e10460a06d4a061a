"""The cluster service: invites in both directions, the membership, and what trust they give.

It answers the pairing routes of the node API (``handle_*``, called by ``routes.py``) and the
``cluster:*`` RPC methods, publishes every change as a numbered ``cluster:event``, and tells its
listeners (the node API's pinned TLS, the proxy's relay) whenever the set of trusted
certificates changes. The membership across the cluster (rosters, removal, leave, rename) is
its ``roster`` (``RosterKeeper``); the joiner's side (received invites, the join window,
accepting) is ``Joining``. Owns no tasks of its own: the component runs ``expire``
every second and the roster pushes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

import msgspec

from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.components.cluster import invites as rules
from backend.components.cluster import messages as m
from backend.components.cluster import pairing_crypto as pc
from backend.components.cluster import peer_client
from backend.components.cluster.incoming import IncomingInvites
from backend.components.cluster.inviter import (
    Outgoing,
    ProtocolViolation,
    answer_confirm,
    answer_start,
    names_invited,
    open_finish,
    sealed_answer,
)
from backend.components.cluster.joining import OWN_INVITE_OPEN, JoinerParts, Joining
from backend.components.cluster.members import (
    DEFAULT_CLUSTER_NAME,
    Members,
    Membership,
    new_cluster_id,
)
from backend.components.cluster.roster_keeper import RosterKeeper
from backend.components.cluster.status import cluster_status
from backend.core.clock import Clock
from backend.core.rpc import NumberedStream
from backend.protocol import errors
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.cluster import (
    ClusterEvent,
    ClusterStatus,
    Invite,
    InviteChanged,
    InviteCreated,
    InviteState,
    JoinWindowState,
    MembershipChanged,
    NodeProbe,
)
from backend.protocol.types.nodes import NodeInfo

log = logging.getLogger(__name__)

# An ended invite stays in the status this long after its expiry time, so screens can show how
# it ended; then it is forgotten.
KEEP_S = 600.0

_CERT_DISAGREES = (
    "{name} at {address} presented another certificate than the one its node-info names "
    "(something may be in between); nothing was sent. Check the address and invite again"
)
_NOT_INVITED = (
    "the computer that answered the invite has another certificate than the one invited "
    "(something may be in between); invite it again"
)
_REMOVED = (
    "{name} was removed from this cluster, and its certificate can never rejoin; it must get "
    "a new identity first"
)


class ClusterService:
    """Holds the invites (memory only) and the membership (``Members``, durable)."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        name: Callable[[], str],
        node_port: Callable[[], int],
        credentials: NodeCredentials,
        key_protection: str,
        members: Members,
        clock: Clock,
        events: NumberedStream[ClusterEvent],
        online: Callable[[NodeId], bool] = lambda _: False,
    ) -> None:
        self._node_id = node_id
        self._online = online
        self._name = name
        self._node_port = node_port
        self._credentials = credentials
        self._key_protection = key_protection
        self._members = members
        self._clock = clock
        self._events = events
        self._outgoing: dict[InviteId, Outgoing] = {}
        self._incoming = IncomingInvites(
            node_id=node_id,
            clock=clock,
            publish=self._publish_invite,
            window_changed=self._window_changed,
        )
        # Set when an invite appears or ends, or the join window moves: ``expire`` has work
        # to come (the cluster component ticks only while ``has_deadlines``).
        self.deadline_added = asyncio.Event()
        # Wrong PINs count per invited computer (its certificate's fingerprint): an impostor's
        # wrong answers must not lock the user out of inviting the real computer.
        self._wrong_pins: dict[str, list[float]] = {}
        self._trust_listeners: list[Callable[[Membership], None]] = []
        self.roster = RosterKeeper(
            node_id=node_id,
            credentials=credentials,
            node_port=node_port,
            members=members,
            clock=clock,
            changed=self._trust_changed,
        )
        parts = JoinerParts(
            credentials, members, self.roster, self._own_facts, self._trust_changed,
            self._outgoing_open,
        )  # fmt: skip
        self._joining = Joining(self._incoming, parts)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def membership(self) -> Membership:
        """The membership now."""
        return self._members.current

    def on_trust_changed(self, listener: Callable[[Membership], None]) -> None:
        """Call ``listener`` with the membership whenever trusted certificates change."""
        self._trust_listeners.append(listener)

    def status(self) -> ClusterStatus:
        """This node's identity, cluster, members, open invites and join window."""
        status = cluster_status(
            self._node_id,
            self._credentials.fingerprint,
            self._key_protection,
            self.membership,
            self._invites(),
            self._online,
        )
        return msgspec.structs.replace(status, join_window=self._incoming.window)

    def presence_changed(self) -> None:
        """A member's link went up or down, or the join window moved: publish the status."""
        status = self.status()
        self._events.publish(lambda seq: MembershipChanged(seq=seq, status=status))

    async def _node_info(self, address: str, port: int) -> NodeInfo:
        try:
            return await peer_client.node_info(address, port)
        except peer_client.PeerUnreachable as exc:
            raise errors.Unavailable(
                f"no PAIR node answers at {address}:{port} ({exc}); check the address and that "
                "PAIR runs there"
            ) from None

    def _refusal(self, address: str, port: int, info: NodeInfo, fingerprint: str) -> str | None:
        """Why the node that answered (with certificate ``fingerprint``) cannot be invited."""
        if info.node_id == self._node_id:
            return f"{address}:{port} is this computer"
        if info.node_id in self.membership.members:
            return f"{info.name} is already a member of this cluster"
        if self.roster.removed_for_good(fingerprint):
            return _REMOVED.format(name=info.name)
        return None

    def _invites(self) -> list[Invite]:
        found = [o.invite for o in self._outgoing.values()] + self._incoming.invites()
        return sorted(found, key=lambda invite: invite.created_at)

    # -- the inviter -----------------------------------------------------------------------------

    async def probe(self, address: str, port: int) -> NodeProbe:
        """Who answers at ``address:port`` (its public node-info), and whether it can be invited."""
        info = await self._node_info(address, port)
        fingerprint = fingerprint_of(await self._their_cert(address, port))
        refusal = self._refusal(address, port, info, fingerprint)
        refusal = refusal or _disagreement(info, address, fingerprint)
        return NodeProbe(info=info, invitable=refusal is None, reason=refusal)

    async def invite(self, address: str, port: int) -> InviteCreated:
        """Invite the node at ``address:port``; the PIN is in the answer (and only there)."""
        now = self._clock.wall()
        info = await self._node_info(address, port)
        cert = await self._their_cert(address, port)
        # The fingerprint shown and compared is that of the certificate TLS presented (the one
        # pinned below), never node-info's claim, which anyone can copy.
        fingerprint = fingerprint_of(cert)
        refusal = self._refusal(address, port, info, fingerprint)
        if refusal is not None:
            kind = errors.InvalidParams if info.node_id == self._node_id else errors.Conflict
            raise kind(refusal)
        invite = Invite(
            id=InviteId(secrets.token_hex(16)),
            direction="outgoing",
            peer_node_id=info.node_id,
            peer_name=info.name,
            peer_address=address,
            peer_fingerprint=fingerprint,
            created_at=now,
            expires_at=now + rules.INVITE_TTL_S,
            state="pending",
        )
        blocked = self._blocked(info, address, fingerprint, now)
        if blocked is not None:
            return InviteCreated(invite=rules.finish(invite, *blocked), pin="")
        return await self._offer(Outgoing(invite, pc.new_pin(), address, port), cert)

    def _blocked(
        self, info: NodeInfo, address: str, fingerprint: str, now: float
    ) -> tuple[InviteState, str | None] | None:
        """Why no invite may be sent now, as the invite's end."""
        disagrees = _disagreement(info, address, fingerprint)
        if disagrees is not None:
            return "failed", disagrees
        if rules.locked_until(self._wrong_pins.get(fingerprint, []), now) is not None:
            return "locked-out", None
        if self._joining.running or self._outgoing_open():
            return "busy", OWN_INVITE_OPEN
        return None

    def _outgoing_open(self) -> bool:
        return bool(rules.pending([outgoing.invite for outgoing in self._outgoing.values()]))

    async def _offer(self, outgoing: Outgoing, cert: bytes) -> InviteCreated:
        invite = outgoing.invite
        cluster_id = self.membership.cluster_id
        offer = m.InviteOffer(
            invite_id=invite.id,
            node_id=self._node_id,
            name=self._name(),
            cert_der=self._credentials.cert_der,
            node_port=self._node_port(),
            cluster_tag=(
                pc.cluster_tag(cluster_id, bytes.fromhex(invite.id), self._credentials.cert_der)
                if cluster_id is not None
                else None
            ),
            expires_in_s=rules.INVITE_TTL_S,
        )
        context = peer_client.pinned_anonymous_context(cert)
        try:
            answer = await peer_client.post(
                outgoing.address, outgoing.port, m.INVITE_PATH, offer, context, m.OfferAnswer
            )
        except peer_client.PeerUnreachable as exc:
            return InviteCreated(invite=rules.finish(invite, "failed", str(exc)), pin="")
        if answer.state != "pending":
            return InviteCreated(invite=rules.finish(invite, answer.state, answer.reason), pin="")
        self._outgoing[invite.id] = outgoing
        self._publish_invite(invite)
        return InviteCreated(invite=invite, pin=outgoing.pin)

    async def _their_cert(self, address: str, port: int) -> bytes:
        try:
            return await peer_client.server_certificate(address, port)
        except peer_client.PeerUnreachable as exc:
            raise errors.Unavailable(str(exc)) from None

    async def cancel(self, invite_id: InviteId) -> Invite:
        """Cancel an invite this node sent (the other computer is told, best effort)."""
        outgoing = self._outgoing.get(invite_id)
        if outgoing is None:
            raise errors.NotFound(f"no invite {invite_id} was sent from this computer")
        self._end_outgoing(outgoing, "canceled")
        await self._tell(outgoing.address, outgoing.port, m.CANCEL_PATH, invite_id)
        return outgoing.invite

    def handle_start(self, start: m.Start) -> m.StartAnswer:
        """The joiner's run begins (public route)."""
        outgoing = self._pending_outgoing(start.invite_id)
        if outgoing is None:
            return m.StartAnswer(state="expired", reason=rules.REASONS["expired"])
        if not names_invited(outgoing, start):
            self._end_outgoing(outgoing, "failed", _NOT_INVITED)
            return m.StartAnswer(state="failed", reason=_NOT_INVITED)
        own_ad = m.associated_data(self._node_id, self._credentials.fingerprint)
        return answer_start(outgoing, start, self._credentials, own_ad)

    def handle_confirm(self, confirm: m.Confirm) -> m.ConfirmAnswer:
        """The joiner's tag: a wrong one ends the invite (public route)."""
        outgoing = self._pending_outgoing(confirm.invite_id)
        if outgoing is None:
            return m.ConfirmAnswer(state="expired", reason=rules.REASONS["expired"])
        if not answer_confirm(outgoing, confirm):
            failures = self._wrong_pins.setdefault(outgoing.invite.peer_fingerprint, [])
            failures.append(self._clock.wall())
            self._end_outgoing(outgoing, "wrong-pin")
            return m.ConfirmAnswer(state="wrong-pin", reason=rules.REASONS["wrong-pin"])
        outgoing.cluster_id = self.membership.cluster_id or new_cluster_id()
        facts = msgspec.structs.replace(self._own_facts(), cluster_id=outgoing.cluster_id)
        return sealed_answer(outgoing, facts)

    async def handle_finish(self, finish: m.Finish, address: str) -> m.Outcome:
        """The joiner's facts: pin it provisionally (durably) until its hello (public route)."""
        outgoing = self._pending_outgoing(finish.invite_id)
        if outgoing is None:
            return m.Outcome(state="expired", reason=rules.REASONS["expired"])
        facts = open_finish(outgoing, finish)
        if self.roster.removed_for_good(fingerprint_of(facts.cert_der)):
            self._end_outgoing(outgoing, "failed")
            return m.Outcome(state="failed", reason=_REMOVED.format(name=facts.name))
        membership = self.membership
        cluster_id = membership.cluster_id or outgoing.cluster_id  # the first pairing founds it
        cluster_name = membership.cluster_name or DEFAULT_CLUSTER_NAME
        member = self.roster.paired_member(facts, address, cluster_id, provisional=True)
        await self._members.add(member, cluster_id=cluster_id, cluster_name=cluster_name)
        self._trust_changed()
        return m.Outcome(state="pending")

    async def handle_hello(self, hello: m.Hello, peer_cert: bytes) -> m.Outcome:
        """The joiner committed (mutual TLS, provisional pin): the pairing is complete."""
        outgoing = self._outgoing.get(InviteId(hello.invite_id))
        member = self.membership.pin_for(peer_cert)
        if outgoing is None or outgoing.joiner is None or member is None:
            raise ProtocolViolation("no pairing waits for this hello")
        if member.node_id != outgoing.joiner.node_id:
            raise ProtocolViolation("hello from another member")
        if member.provisional:
            await self._members.confirm(member.node_id)
            self._trust_changed()
        self._end_outgoing(outgoing, "paired")
        log.info("paired with %s (%s)", member.name, member.fingerprint)
        self.roster.request_push()
        return m.Outcome(state="paired")

    def _pending_outgoing(self, invite_id: str) -> Outgoing | None:
        outgoing = self._outgoing.get(InviteId(invite_id))
        if outgoing is None or outgoing.invite.state != "pending":
            return None
        if self._clock.wall() >= outgoing.invite.expires_at:
            self._end_outgoing(outgoing, "expired")
            return None
        return outgoing

    def _end_outgoing(
        self, outgoing: Outgoing, state: InviteState, reason: str | None = None
    ) -> None:
        ended = rules.finish(outgoing.invite, state, reason)
        if ended is not outgoing.invite:
            outgoing.invite = ended
            outgoing.pin = ""  # the PIN is dead: drop it from memory
            self._publish_invite(ended)

    # -- the joiner ------------------------------------------------------------------------------

    def open_join_window(self, minutes: float) -> JoinWindowState:
        """Accept invites from other computers for ``minutes`` (1-15)."""
        return JoinWindowState(window=self._incoming.open_window(minutes))

    def close_join_window(self) -> JoinWindowState:
        """Stop accepting invites (those already received stay open until they end)."""
        self._incoming.close_window()
        return JoinWindowState()

    def handle_offer(self, offer: m.InviteOffer, address: str) -> m.OfferAnswer:
        """Another computer invites this one (public route): hold it and tell the app."""
        return self._joining.handle_offer(offer, address)

    async def accept(self, invite_id: InviteId, pin: str) -> Invite:
        """The user typed the PIN for an invite this computer received."""
        return await self._joining.accept(invite_id, pin)

    async def decline(self, invite_id: InviteId) -> Invite:
        """Decline an invite this computer received (the inviter is not told)."""
        return self._joining.decline(invite_id)

    def handle_cancel(self, end: m.InviteEnd) -> m.Outcome:
        """The inviter canceled (public route)."""
        return self._incoming.cancel(end)

    # -- both ------------------------------------------------------------------------------------

    async def expire(self) -> None:
        """End invites whose time is up; drop a joiner whose pairing never completed."""
        now = self._clock.wall()
        for outgoing in list(self._outgoing.values()):
            if outgoing.invite.state == "pending" and now >= outgoing.invite.expires_at:
                self._end_outgoing(outgoing, "expired")
                joiner = outgoing.joiner
                member = self.membership.members.get(joiner.node_id) if joiner else None
                if member is not None and member.provisional:
                    await self._members.undo_join(member.node_id)
                    self._trust_changed()
        for invite_id, outgoing in list(self._outgoing.items()):
            if outgoing.invite.state != "pending" and now >= outgoing.invite.expires_at + KEEP_S:
                del self._outgoing[invite_id]  # ended long ago: status lists open invites
        self._incoming.expire()
        self._wrong_pins = {
            peer: recent
            for peer, times in self._wrong_pins.items()
            if (recent := rules.recent_failures(times, now))
        }

    async def _tell(self, address: str, port: int, path: str, invite_id: InviteId) -> None:
        try:
            cert = await peer_client.server_certificate(address, port)
            context = peer_client.pinned_anonymous_context(cert)
            await peer_client.post(
                address, port, path, m.InviteEnd(invite_id=invite_id), context, m.Outcome
            )
        except peer_client.PeerUnreachable as exc:
            log.info("could not tell %s:%d that invite %s ended: %s", address, port, invite_id, exc)

    def _own_facts(self) -> m.SealedFacts:
        membership = self.membership
        return m.SealedFacts(
            node_id=self._node_id,
            name=self._name(),
            cert_der=self._credentials.cert_der,
            node_port=self._node_port(),
            cluster_id=membership.cluster_id,
            cluster_name=membership.cluster_name,
        )

    def _publish_invite(self, invite: Invite) -> None:
        self.deadline_added.set()
        self._events.publish(lambda seq: InviteChanged(seq=seq, invite=invite))

    def _window_changed(self) -> None:
        self.deadline_added.set()
        self.presence_changed()

    def has_deadlines(self) -> bool:
        """Whether ``expire`` has anything to end or forget later: an invite, sent or received
        (open or recently ended), wrong PINs still counted, or the join window."""
        return bool(self._outgoing or self._wrong_pins) or not self._incoming.quiet()

    def _trust_changed(self) -> None:
        status = self.status()
        self._events.publish(lambda seq: MembershipChanged(seq=seq, status=status))
        for listener in self._trust_listeners:
            listener(self.membership)


def _disagreement(info: NodeInfo, address: str, fingerprint: str) -> str | None:
    """Why ``info`` cannot be believed: it names another certificate than TLS presented."""
    if info.fingerprint is None or info.fingerprint == fingerprint:
        return None
    return _CERT_DISAGREES.format(name=info.name, address=address)
