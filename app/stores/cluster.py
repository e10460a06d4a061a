"""This node's cluster (``cluster:subscribe``): its identity, the cluster's name and members, and
the invites open in either direction, shared by the Cluster page, the Add node dialog, the PIN
panel and the invitee prompt."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.base import StreamStore
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.cluster import (
    ClusterEvent,
    ClusterMember,
    ClusterSnapshot,
    ClusterStatus,
    Invite,
    InviteChanged,
    MembershipChanged,
)


class ClusterStore(StreamStore[NoParams, ClusterSnapshot, ClusterEvent]):
    """The last ``ClusterStatus`` and every invite by id (ended ones too, until the next
    snapshot, so a panel can show how its invite ended). ``status_changed`` after a membership
    change, ``invite_changed`` names an invite that appeared or moved on, ``invite_received``
    names an incoming invite that is waiting for its PIN here; ``reset`` after every
    snapshot."""

    status_changed = Signal()
    invite_changed = Signal(str)  # InviteId
    invite_received = Signal(str)  # InviteId

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(connection, methods.CLUSTER_SUBSCRIBE, methods.CLUSTER_EVENT, None, parent)
        self._status: ClusterStatus | None = None
        self._invites: dict[InviteId, Invite] = {}

    @property
    def status(self) -> ClusterStatus | None:
        """The cluster as last told; None until a snapshot arrived."""
        return self._status

    @property
    def invites(self) -> Mapping[InviteId, Invite]:
        """Invites by id, open and ended (read-only)."""
        return self._invites

    def invite(self, invite_id: InviteId) -> Invite | None:
        """One invite, if known."""
        return self._invites.get(invite_id)

    def members(self) -> list[ClusterMember]:
        """This node's cluster's members (not this node), by name."""
        if self._status is None:
            return []
        return sorted(
            self._status.members, key=lambda member: (member.name.lower(), member.node_id)
        )

    def member(self, node_id: NodeId) -> ClusterMember | None:
        """One member, if it is one."""
        return next((m for m in self.members() if m.node_id == node_id), None)

    def pending_incoming(self) -> list[Invite]:
        """Incoming invites still waiting for a PIN, oldest first."""
        waiting = [
            invite
            for invite in self._invites.values()
            if invite.direction == "incoming" and invite.state == "pending"
        ]
        return sorted(waiting, key=lambda invite: invite.created_at)

    def _load(self, snapshot: ClusterSnapshot) -> None:
        self._status = snapshot.status
        self._invites = {invite.id: invite for invite in snapshot.status.invites}

    def _apply(self, event: ClusterEvent) -> None:
        match event:
            case InviteChanged(invite=invite):
                self._invites[invite.id] = invite
                self.invite_changed.emit(invite.id)
                if invite.direction == "incoming" and invite.state == "pending":
                    self.invite_received.emit(invite.id)
            case MembershipChanged(status=status):
                self._status = status
                for invite in status.invites:
                    self._invites[invite.id] = invite
                self.status_changed.emit()

    def _forget(self) -> None:
        self._status = None
        self._invites = {}
