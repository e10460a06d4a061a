"""``cluster:status`` as the wire shows it, from the membership and the invites."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from backend.components.cluster.members import Member, Membership
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import ClusterMember, ClusterStatus, Invite


def cluster_status(
    node_id: NodeId,
    fingerprint: str,
    key_protection: str,
    membership: Membership,
    invites: Sequence[Invite],
    online: Callable[[NodeId], bool] = lambda _: False,
) -> ClusterStatus:
    """This node's identity, cluster, members, invites, and who removed it (if someone did)."""
    return ClusterStatus(
        node_id=node_id,
        fingerprint=fingerprint,
        key_protection="keyring" if key_protection == "keyring" else "file",
        cluster_id=membership.cluster_id,
        cluster_name=membership.cluster_name,
        members=[
            wire_member(member, online(member.node_id)) for member in membership.members.values()
        ],
        invites=list(invites),
        removed=membership.removed_from,
    )


def wire_member(member: Member, online: bool = False) -> ClusterMember:
    """A member as ``cluster:status`` lists it: ``online`` while this node's link to it is up."""
    return ClusterMember(
        node_id=member.node_id,
        name=member.name,
        fingerprint=member.fingerprint,
        address=member.address,
        node_port=member.node_port,
        added_by=member.added_by,
        added_at=member.added_at,
        state="provisional" if member.provisional else "online" if online else "offline",
    )
