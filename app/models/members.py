"""The Cluster page's tables: the cluster's other members, and this computer's LAN API keys.

A member's row is built by a pure function from three stores' facts: the membership
(``cluster:*``: name, address, who added it, the member link's state), its engines as the
member link last told them (``engine:*`` ``members``) and when discovery last saw it. Times are
rendered against a clock given by the caller, so the rows are plain comparable values and a
refresh changes only the rows whose text moved on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal

import msgspec
from PySide6.QtCore import QObject
from PySide6.QtGui import QColor

from app.models.engines import STATE_LABELS
from app.models.keyed_table import ROW_ROLE, Column, KeyedTableModel, Role
from app.window.look import State, state_colour
from backend.protocol.types.apikeys import ApiKeyId, ApiKeyInfo, ApiKeyScope
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import ClusterMember
from backend.protocol.types.engines import MemberEngines
from backend.protocol.types.nodes import DiscoveredNode

MemberState = Literal["online", "offline", "unreachable", "provisional"]
NOT_SEEN = "—"

STATE_TEXT: dict[MemberState, str] = {
    "online": "Online",
    "offline": "Offline",
    "unreachable": "Unreachable",
    "provisional": "Finishing pairing…",
}
STATE_TIPS: dict[MemberState, str] = {
    "online": "This computer's link to it is up: its engines and models can be used from here.",
    "offline": "This computer's link to it is down; PAIR keeps trying to reach it.",
    "unreachable": "PAIR cannot reach it; it keeps trying.",
    "provisional": "Paired; the last step of the pairing is still outstanding.",
}
MEMBER_STATES: dict[MemberState, State] = {
    "online": State.OK,
    "offline": State.IDLE,
    "unreachable": State.ERROR,
    "provisional": State.PENDING,
}


class MemberRow(msgspec.Struct, frozen=True):
    """One member as the table shows it: texts ready to display, and their tooltips."""

    node_id: NodeId
    name: str
    fingerprint: str
    state: MemberState
    state_tip: str
    address: str  # ``host:port`` of its node API
    engines: str
    engines_tip: str
    last_seen: str
    last_seen_tip: str
    added: str
    added_tip: str


def ago(seconds: float) -> str:
    """``now``, ``2 min ago``, ``3 h ago``, ``4 d ago`` (a future time is ``now``)."""
    whole = int(max(0.0, seconds))
    if whole < 60:
        return "now"
    if whole < 3600:
        return f"{whole // 60} min ago"
    if whole < 86400:
        return f"{whole // 3600} h ago"
    return f"{whole // 86400} d ago"


def day_text(at: float) -> str:
    """A date as people write it: ``3 Mar 2025`` (local time)."""
    moment = time.localtime(at)
    return f"{moment.tm_mday} {time.strftime('%b %Y', moment)}"


def moment_text(at: float) -> str:
    """A date and time to the minute: ``2025-03-03 14:05`` (local time)."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def host_port(address: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"{host}:{port}"


def member_state(member: ClusterMember, engines: MemberEngines | None) -> MemberState:
    """Provisional while the pairing ends; unreachable when its link failed with a reason;
    otherwise the membership's online or offline."""
    if member.state == "provisional":
        return "provisional"
    if engines is not None and not engines.reachable and engines.error:
        return "unreachable"
    return member.state


def engines_summary(engines: MemberEngines | None) -> str:
    """``Ollama running, LM Studio stopped`` from its installed engines."""
    if engines is None or (not engines.engines and not engines.reachable):
        return "Not heard yet"
    installed = [status for status in engines.engines if status.state != "not-installed"]
    if not installed:
        return "No engines installed"
    return ", ".join(
        f"{status.display_name} {STATE_LABELS[status.state].lower()}" for status in installed
    )


def _engines_text(engines: MemberEngines | None) -> tuple[str, str]:
    """The engines column's text and tooltip: what is known, and how old it is."""
    summary = engines_summary(engines)
    if engines is None:
        return summary, "Its engines are shown once this computer's link to it is up."
    if engines.reachable:
        return summary, summary
    if not engines.engines:
        return summary, f"Never heard. {engines.error or ''}".strip()
    tip = f"As last heard before the link went down. {engines.error or ''}".strip()
    return f"{summary} (last heard)", tip


def _state_tip(state: MemberState, engines: MemberEngines | None) -> str:
    if state == "unreachable" and engines is not None and engines.error:
        return f"{engines.error.rstrip('.')}. PAIR keeps trying."
    return STATE_TIPS[state]


def _last_seen(state: MemberState, node: DiscoveredNode | None, now: float) -> tuple[str, str]:
    seen = node.last_seen if node is not None else None
    if seen is None:
        if state == "online":
            return "now", "Its link is up."
        return NOT_SEEN, "Not seen on the network since the PAIR service started."
    return ago(now - seen), f"Last seen {moment_text(seen)}"


def _added_by(member: ClusterMember, self_id: NodeId | None, names: Mapping[NodeId, str]) -> str:
    if member.added_by == self_id:
        return "this computer"
    return names.get(member.added_by) or f"a former member ({member.added_by[:8]})"


def member_row(
    member: ClusterMember,
    engines: MemberEngines | None,
    node: DiscoveredNode | None,
    *,
    self_id: NodeId | None,
    names: Mapping[NodeId, str],
    now: float,
) -> MemberRow:
    """The row of ``member``; ``names`` names the other members (for "added by")."""
    state = member_state(member, engines)
    engines_text, engines_tip = _engines_text(engines)
    seen, seen_tip = _last_seen(state, node, now)
    by = _added_by(member, self_id, names)
    return MemberRow(
        node_id=member.node_id,
        name=member.name,
        fingerprint=member.fingerprint,
        state=state,
        state_tip=_state_tip(state, engines),
        address=host_port(member.address, member.node_port),
        engines=engines_text,
        engines_tip=engines_tip,
        last_seen=seen,
        last_seen_tip=seen_tip,
        added=f"{day_text(member.added_at)} by {by}",
        added_tip=f"Added {moment_text(member.added_at)} by {by}",
    )


def _name_tip(row: MemberRow) -> str:
    return f"Node id {row.node_id}\nCertificate {row.fingerprint}"


def _state_colour(row: MemberRow) -> QColor:
    return state_colour(MEMBER_STATES[row.state])


MEMBER_COLUMNS: tuple[Column[MemberRow], ...] = (
    Column("Name", lambda r: r.name, tooltip=_name_tip),
    Column(
        "State",
        lambda r: STATE_TEXT[r.state],
        tooltip=lambda r: r.state_tip,
        foreground=_state_colour,
    ),
    Column("Address", lambda r: r.address),
    Column("Engines", lambda r: r.engines, tooltip=lambda r: r.engines_tip),
    Column("Last seen", lambda r: r.last_seen, tooltip=lambda r: r.last_seen_tip),
    Column("Added", lambda r: r.added, tooltip=lambda r: r.added_tip),
)
NODE_ROLE = ROW_ROLE + 1
STATE_ROLE = ROW_ROLE + 2
_MEMBER_ROLES: dict[int, Role[MemberRow]] = {
    NODE_ROLE: Role(b"node", lambda r: r.node_id),
    STATE_ROLE: Role(b"state", lambda r: r.state),
}


class MembersModel(KeyedTableModel[NodeId, MemberRow]):
    """The cluster's other members keyed by node id; ``ROW_ROLE`` gives the ``MemberRow``,
    ``NODE_ROLE`` its node id and ``STATE_ROLE`` its state."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(MEMBER_COLUMNS, lambda row: row.node_id, parent, roles=_MEMBER_ROLES)


SCOPE_LABELS: Mapping[ApiKeyScope, str] = {"inference": "Inference", "admin": "Admin"}
SCOPE_TIPS: Mapping[ApiKeyScope, str] = {
    "inference": "The inference APIs and model lists",
    "admin": "Also this computer's engines' own paths: pull, delete, create, slots",
}
KEY_COLUMNS: tuple[Column[ApiKeyInfo], ...] = (
    Column("Name", lambda k: k.name),
    Column("Key", lambda k: f"{k.prefix}…", tooltip=lambda _k: "Only the start of the secret"),
    Column("Scope", lambda k: SCOPE_LABELS[k.scope], tooltip=lambda k: SCOPE_TIPS[k.scope]),
    Column(
        "Created", lambda k: day_text(k.created_at), tooltip=lambda k: moment_text(k.created_at)
    ),
    Column("Last used", lambda k: last_used_text(k), tooltip=lambda k: last_used_tip(k)),
)


def last_used_text(key: ApiKeyInfo, now: float | None = None) -> str:
    """``never``, or how long ago another computer last used the key."""
    if key.last_used_at is None:
        return "never"
    return ago((time.time() if now is None else now) - key.last_used_at)


def last_used_tip(key: ApiKeyInfo) -> str:
    """When the key was last used (known to within a quarter of a minute)."""
    if key.last_used_at is None:
        return "No computer has used this key"
    return f"Last used {moment_text(key.last_used_at)}"


class ApiKeysModel(KeyedTableModel[ApiKeyId, ApiKeyInfo]):
    """This computer's LAN API keys by id, oldest first: name, prefix, scope, creation date and
    last use (a key's secret is never listed, so it is never here)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(KEY_COLUMNS, lambda key: key.id, parent)
