"""Keeps this node's membership in step with the rest of the cluster.

It merges the rosters other members push (``POST /v1/cluster/roster``) and answers with its
own, applies removal proofs (``POST /v1/cluster/members/remove``), and carries out
``cluster:remove``, ``cluster:leave`` and ``cluster:rename``. Every change is applied here at
once (durably, then the pins through ``changed``) and then pushed: ``request_push`` wakes the
component, which calls ``push_all`` (and does so every 30 s anyway, for members that were
offline). Owns no tasks itself; one lock keeps merges and removals from interleaving, so a
tombstone can never be overtaken by a pin computed before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import msgspec
from msgspec.structs import replace

from backend.common.certificates import NodeCredentials, fingerprint_of
from backend.components.cluster import merge as mg
from backend.components.cluster import messages as m
from backend.components.cluster import peer_client
from backend.components.cluster import roster as r
from backend.components.cluster.endorsements import (
    Endorsement,
    RemovalProof,
    Tombstone,
    endorse,
    prove_removal,
)
from backend.components.cluster.members import Changes, Member, Members
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import ClusterLeft, MemberRemoved, RemovedFromCluster

log = logging.getLogger(__name__)

LEAVE_TELL_S = 5.0  # how long ``cluster:leave`` waits for the members to hear it


class RemovedHere(Exception):
    """This node was just removed from the cluster (it left; nothing to answer with)."""


class _Notice(msgspec.Struct):
    """A removal proof still to be delivered to the member it removed."""

    member: Member
    proof: RemovalProof


class RosterKeeper:
    """Merges, removes, leaves and renames; tells the other members (see the module doc)."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        credentials: NodeCredentials,
        node_port: Callable[[], int],
        members: Members,
        clock: Clock,
        changed: Callable[[], None],
    ) -> None:
        self._node_id = node_id
        self._credentials = credentials
        self._node_port = node_port
        self._members = members
        self._clock = clock
        self._changed = changed
        self._own = r.Self(node_id, credentials.fingerprint, credentials.cert_der)
        self._lock = asyncio.Lock()
        self._push_wanted = asyncio.Event()
        self._notices: dict[str, _Notice] = {}

    # -- endorsing (pairing) -------------------------------------------------------------------

    def endorsement_for(
        self, cluster_id: str, node_id: NodeId, fingerprint: str, name: str, *, after: float = 0.0
    ) -> Endorsement:
        """This node's endorsement of a node it pairs with (or pins through another member),
        issued no earlier than ``after``.

        Issued after the node's own leave, if one is on record: that is what lets a node that
        left come back with a new invite on every member, whatever their clocks say.
        """
        proof = self._members.current.proofs.get(fingerprint)
        not_before = proof.removed_at + 0.001 if proof is not None and proof.left else after
        return endorse(
            self._credentials,
            self._node_id,
            cluster_id,
            node_id=node_id,
            fingerprint=fingerprint,
            name=name,
            issued_at=max(self._clock.wall(), not_before, after),
        )

    def paired_member(
        self, facts: m.SealedFacts, address: str, cluster_id: str, *, provisional: bool
    ) -> Member:
        """The node this one just paired with by PIN, endorsed by this node."""
        fingerprint = fingerprint_of(facts.cert_der)
        return Member(
            node_id=facts.node_id,
            name=facts.name,
            cert_der=facts.cert_der,
            fingerprint=fingerprint,
            added_by=self._node_id,
            added_at=self._clock.wall(),
            address=address,
            node_port=facts.node_port,
            provisional=provisional,
            endorsements=(
                self.endorsement_for(cluster_id, facts.node_id, fingerprint, facts.name),
            ),
        )

    def removed_for_good(self, fingerprint: str) -> bool:
        """Whether another member removed the certificate ``fingerprint`` (it cannot rejoin)."""
        membership = self._members.current
        proof = membership.proofs.get(fingerprint)
        return fingerprint in membership.removed and (proof is None or not proof.left)

    # -- the member routes ---------------------------------------------------------------------

    async def handle_roster(self, roster: r.Roster, sender: Member, address: str) -> r.Roster:
        """Merge a member's roster; answer with ours (``RosterRefused``, ``RemovedHere``)."""
        async with self._lock:
            if self._members.current.pin_for(sender.cert_der) is None:
                raise mg.RosterRefused("the sender is no longer a member here")
            where = (sender.node_id, address, roster.node_port)
            merged = mg.merge(
                self._members.current,
                roster,
                self._own,
                now=self._clock.wall(),
                sender_address=where,
            )
            if merged.removed_self is not None:
                await self._removed(merged.removed_self)
                raise RemovedHere
            await self._apply(merged)
            return r.roster_of(self._members.current, self._node_port())

    async def handle_removal(self, notice: r.RemovalNotice) -> r.RemovalAnswer:
        """Apply a removal proof a member sent (``RosterRefused`` if it does not verify)."""
        async with self._lock:
            merged = mg.merge_removal(self._members.current, notice.proof, self._own)
            if merged.removed_self is not None:
                await self._removed(merged.removed_self)
                return r.RemovalAnswer(state="left")
            if not merged.changes:
                return r.RemovalAnswer(state="known")
            await self._apply(merged)
            return r.RemovalAnswer(state="removed")

    # -- the RPC methods -----------------------------------------------------------------------

    async def remove(self, node_id: NodeId) -> MemberRemoved:
        """Remove a member for good: tombstoned and unpinned now, then everyone is told."""
        if node_id == self._node_id:
            raise errors.InvalidParams("a computer cannot remove itself: use cluster:leave")
        async with self._lock:
            membership = self._members.current
            member = membership.members.get(node_id)
            if member is None or membership.cluster_id is None:
                raise errors.NotFound(f"{node_id} is not a member of this cluster")
            proof = self._proof(membership.cluster_id, member.node_id, member.fingerprint)
            tombstone = Tombstone(proof=proof, removed=member.voucher())
            await self._members.apply(Changes(tombstones=[tombstone]))
            self._notices[member.fingerprint] = _Notice(member, proof)
        log.info("removed %s (%s) from the cluster", member.name, member.fingerprint)
        self._changed()
        self.request_push()
        return MemberRemoved(
            node_id=member.node_id,
            name=member.name,
            fingerprint=member.fingerprint,
            removed_at=proof.removed_at,
        )

    async def leave(self) -> ClusterLeft:
        """Tell every member this node leaves (a signed proof), then drop every pin."""
        membership = self._members.current
        if membership.cluster_id is None:
            raise errors.Conflict("this computer is in no cluster")
        proof = self._proof(membership.cluster_id, self._node_id, self._credentials.fingerprint)
        others = membership.trusted()
        # Told without the lock: a member leaving at the same moment must get our answer.
        told = await self._tell(others, proof)
        async with self._lock:
            if self._members.current.cluster_id == membership.cluster_id:
                self._notices.clear()
                await self._members.leave()
        log.info(
            "left cluster %s (%d of %d members told)", membership.cluster_id, len(told), len(others)
        )
        self._changed()
        return ClusterLeft(
            cluster_id=membership.cluster_id,
            told=[member.node_id for member in others if member.node_id in told],
            not_told=[member.node_id for member in others if member.node_id not in told],
        )

    async def rename(self, text: str) -> None:
        """Rename the cluster; the newest rename wins everywhere."""
        try:
            name = r.cluster_name(text)
        except ValueError as exc:
            raise errors.InvalidParams(str(exc)) from None
        async with self._lock:
            membership = self._members.current
            if membership.cluster_id is None:
                raise errors.Conflict("this computer is in no cluster to rename")
            # Never older than the name it replaces, even on a computer whose clock is behind.
            at = max(self._clock.wall(), membership.cluster_name_at + 0.001)
            await self._members.apply(Changes(name=(name, at)))
        self._changed()
        self.request_push()

    # -- pushing -------------------------------------------------------------------------------

    def request_push(self) -> None:
        """Ask for a push of the roster to every member soon (pushes coalesce)."""
        self._push_wanted.set()

    async def wait_for_push_request(self) -> None:
        """Return once a push was requested (and take the request)."""
        await self._push_wanted.wait()
        self._push_wanted.clear()

    async def push_all(self) -> None:
        """Push the roster to every trusted member, merging their answers, and deliver the
        removal proofs still owed to removed members; best effort, all at once."""
        await self._endorse_unendorsed()
        membership = self._members.current
        if membership.cluster_id is None:
            return
        roster = r.roster_of(membership, self._node_port())
        async with asyncio.TaskGroup() as group:
            for notice in list(self._notices.values()):
                name = f"cluster:removal-notice:{notice.member.node_id}"
                group.create_task(self._deliver(notice), name=name)
            for member in membership.trusted():
                if member.address:
                    name = f"cluster:roster-push:{member.node_id}"
                    group.create_task(self._push(member, roster), name=name)

    async def _push(self, member: Member, roster: r.Roster) -> None:
        context = peer_client.mutual_context(self._credentials, member.cert_der)
        try:
            answer = await peer_client.post(
                member.address, member.node_port, r.ROSTER_PATH, roster, context, r.Roster
            )
        except peer_client.PeerUnreachable as exc:
            log.debug("roster push to %s failed: %s", member.name, exc)
            return
        async with self._lock:
            current = self._members.current
            if current.pin_for(member.cert_der) is None:
                return  # removed while the push was under way
            try:
                merged = mg.merge(
                    current,
                    answer,
                    self._own,
                    now=self._clock.wall(),
                    sender_address=(member.node_id, member.address, answer.node_port),
                )
            except mg.RosterRefused as exc:
                log.warning("%s answered with a roster of another cluster: %s", member.name, exc)
                return
            if merged.removed_self is not None:
                await self._removed(merged.removed_self)
                return
            await self._apply(merged)

    async def _deliver(self, notice: _Notice) -> None:
        member = notice.member
        context = peer_client.mutual_context(self._credentials, member.cert_der)
        body = r.RemovalNotice(proof=notice.proof)
        try:
            await peer_client.post(
                member.address, member.node_port, r.REMOVE_PATH, body, context, r.RemovalAnswer
            )
        except peer_client.PeerUnreachable as exc:
            log.debug("could not tell %s it was removed (yet): %s", member.name, exc)
            return
        self._notices.pop(member.fingerprint, None)

    async def _tell(self, members: Sequence[Member], proof: RemovalProof) -> set[NodeId]:
        told: set[NodeId] = set()

        async def tell(member: Member) -> None:
            context = peer_client.mutual_context(self._credentials, member.cert_der)
            body = r.RemovalNotice(proof=proof)
            try:
                await peer_client.post(
                    member.address, member.node_port, r.REMOVE_PATH, body, context, r.RemovalAnswer
                )
            except peer_client.PeerUnreachable as exc:
                log.info("could not tell %s that this computer leaves: %s", member.name, exc)
                return
            told.add(member.node_id)

        try:
            async with asyncio.timeout(LEAVE_TELL_S), asyncio.TaskGroup() as group:
                for member in members:
                    group.create_task(tell(member), name=f"cluster:leave-notice:{member.node_id}")
        except TimeoutError:
            log.info("leaving without waiting longer for %d members", len(members) - len(told))
        return told

    # -- applying ------------------------------------------------------------------------------

    async def _apply(self, merged: mg.Merge) -> None:
        changes = merged.changes
        if not changes:
            return
        if changes.pinned:
            changes = replace(changes, pinned=[self._vouched(one) for one in changes.pinned])
        await self._members.apply(changes)
        for member in merged.newly_removed:
            proof = self._members.current.proofs.get(member.fingerprint)
            if proof is not None:
                self._notices[member.fingerprint] = _Notice(member, proof)
        for member in changes.pinned:
            log.info(
                "trusting %s (%s), added by %s", member.name, member.fingerprint, member.added_by
            )
        self._changed()
        if changes.pinned or changes.tombstones or changes.name:
            self.request_push()  # what we learnt, the others may not know yet

    def _vouched(self, member: Member) -> Member:
        """``member`` with this node's own endorsement added (see ``endorsements.py``)."""
        cluster_id = self._members.current.cluster_id
        assert cluster_id is not None
        own = self.endorsement_for(
            cluster_id,
            member.node_id,
            member.fingerprint,
            member.name,
            after=member.endorsed_at,  # never older than what admitted it
        )
        return replace(member, endorsements=(*member.endorsements, own))

    async def _endorse_unendorsed(self) -> None:
        """Sign for members pinned before endorsements existed, so the roster can carry them."""
        async with self._lock:
            membership = self._members.current
            missing = [
                member
                for member in membership.trusted()
                if not any(e.endorser == self._node_id for e in member.endorsements)
            ]
            if missing and membership.cluster_id is not None:
                vouched = [self._vouched(member) for member in missing]
                await self._members.apply(Changes(pinned=vouched))

    async def _removed(self, proof: RemovalProof) -> None:
        """Another member removed this node: leave the cluster, and remember who did it."""
        membership = self._members.current
        remover = membership.members.get(proof.remover)
        removed_from = RemovedFromCluster(
            cluster_id=membership.cluster_id or "",
            cluster_name=membership.cluster_name,
            by=proof.remover,
            by_name=remover.name if remover is not None else proof.remover,
            at=proof.removed_at,
        )
        self._notices.clear()
        await self._members.leave(removed_from)
        log.warning("%s removed this computer from the cluster", removed_from.by_name)
        self._changed()

    def _proof(self, cluster_id: str, node_id: NodeId, fingerprint: str) -> RemovalProof:
        return prove_removal(
            self._credentials,
            self._node_id,
            cluster_id,
            node_id=node_id,
            fingerprint=fingerprint,
            removed_at=self._clock.wall(),
        )
