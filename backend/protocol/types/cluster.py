"""The cluster: invites and pairing, members, status and their events (``cluster:*``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from backend.protocol.types.base import InviteId, NodeId, Wire
from backend.protocol.types.nodes import NodeInfo

InviteState = Literal[
    "pending",
    "paired",
    "wrong-pin",
    "declined",
    "canceled",
    "expired",
    "rejected",
    "busy",
    "locked-out",
    "failed",
    "not-accepting",
]
InviteDirection = Literal["outgoing", "incoming"]


class Invite(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """One pairing attempt as either side sees it; ``reason`` says in words how it ended.

    ``outgoing``: this node invited ``peer`` and shows the PIN. ``incoming``: ``peer`` invited
    this node; the user types the PIN here (``cluster:accept``). Times are Unix seconds.
    """

    id: InviteId
    direction: InviteDirection
    peer_node_id: NodeId
    peer_name: str
    peer_address: str
    peer_fingerprint: str
    created_at: float
    expires_at: float
    state: InviteState
    reason: str | None = None


class InviteCreated(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:invite``: the invite and the PIN to show (the only time it is sent)."""

    invite: Invite
    pin: str


class InviteParams(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:invite``: the other computer's address (or hostname) and port."""

    address: str
    port: int = 14320


class InviteRef(Wire, frozen=True, kw_only=True):
    """Parameters naming one invite (``cluster:decline``, ``cluster:cancel``)."""

    id: InviteId


class InviteAnswer(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:accept``: the invite and the six digits the user typed."""

    id: InviteId
    pin: str


class ClusterMember(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """A member of this node's cluster as ``cluster:status`` shows it."""

    node_id: NodeId
    name: str
    fingerprint: str
    address: str
    node_port: int
    added_by: NodeId
    added_at: float
    state: Literal["online", "offline", "provisional"] = "offline"


class ClusterStatus(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer to ``cluster:status``: this node's identity, its cluster and the open invites."""

    node_id: NodeId
    fingerprint: str
    key_protection: Literal["keyring", "file"]
    cluster_id: str | None = None
    cluster_name: str = ""
    members: list[ClusterMember] = msgspec.field(default_factory=list)
    invites: list[Invite] = msgspec.field(default_factory=list)
    removed: RemovedFromCluster | None = None  # another member removed this node
    join_window: JoinWindow | None = None  # open while this node accepts invites


class JoinWindowParams(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:open-join-window``: how long to accept invites (1-15 minutes)."""

    minutes: float = 10.0


class JoinWindow(Wire, frozen=True, kw_only=True):
    """While open, this node accepts invites from other computers (until ``closes_at``, Unix s).

    Closed, every invite is answered ``not-accepting`` and nothing is shown to the user.
    """

    opened_at: float
    closes_at: float


class JoinWindowState(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer to ``cluster:open-join-window`` and ``cluster:close-join-window``."""

    window: JoinWindow | None = None


class NodeProbe(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Answer to ``cluster:probe``: the public node-info of the PAIR node at an address, and
    whether this node can invite it (``reason`` says why not)."""

    info: NodeInfo
    invitable: bool
    reason: str | None = None


class ClusterSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:subscribe``: apply later ``cluster:event`` pushes after ``seq``."""

    seq: int
    status: ClusterStatus


class InviteChanged(Wire, frozen=True, kw_only=True, tag_field="event", tag="invite_changed"):
    """An invite appeared or moved on (received, paired, expired, ...)."""

    seq: int
    invite: Invite


class MembershipChanged(
    Wire, frozen=True, kw_only=True, tag_field="event", tag="membership_changed"
):
    """The cluster, its members or this node's trust changed: the whole new status."""

    seq: int
    status: ClusterStatus


ClusterEvent = InviteChanged | MembershipChanged


class MemberRef(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:remove``: the member to remove."""

    node_id: NodeId


class MemberRemoved(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:remove``: who is out, for good (its certificate is tombstoned)."""

    node_id: NodeId
    name: str
    fingerprint: str
    removed_at: float


class ClusterLeft(Wire, frozen=True, kw_only=True):
    """Answer to ``cluster:leave``: the cluster left, and which members heard it in time."""

    cluster_id: str
    told: list[NodeId] = msgspec.field(default_factory=list)
    not_told: list[NodeId] = msgspec.field(default_factory=list)


class ClusterRename(Wire, frozen=True, kw_only=True):
    """Parameters of ``cluster:rename``: 1-64 printable characters (trimmed)."""

    name: str


class RemovedFromCluster(Wire, frozen=True, kw_only=True):
    """In ``ClusterStatus``: another member removed this node from its cluster (by whom, when).

    Kept until this node joins a cluster again; it can join only with a new identity, because
    the members keep its certificate tombstoned.
    """

    cluster_id: str
    cluster_name: str
    by: NodeId
    by_name: str
    at: float
