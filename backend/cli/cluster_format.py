"""Parsing and wording of the cluster commands (``cluster_commands``): addresses, PINs, invite
ids given by prefix, the outcome of an invite in words, and the tables. Plain functions, no I/O.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Sequence

import msgspec

from backend.protocol.types.cluster import (
    ClusterLeft,
    ClusterMember,
    ClusterStatus,
    Invite,
    InviteDirection,
    InviteState,
    JoinWindow,
    MemberRemoved,
)

DEFAULT_NODE_PORT = 14320
SHORT_ID = 8
SHORT_FINGERPRINT = 16
_PIN = re.compile(r"[0-9]{6}")
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
PIN_MESSAGE = "the PIN is six digits (0-9), as shown on the other computer"

WORDS: dict[InviteState, str] = {
    "pending": "Still open",
    "paired": "Paired",
    "wrong-pin": "Wrong PIN",
    "declined": "Declined",
    "canceled": "Canceled",
    "expired": "Expired",
    "rejected": "Rejected",
    "busy": "Busy",
    "locked-out": "Locked out",
    "failed": "Failed",
    "not-accepting": "Not accepting invites",
}
# What the user reads when an invite ends; {reason} is the broker's own words.
OUTCOMES: dict[tuple[InviteDirection, InviteState], str] = {
    ("outgoing", "pending"): "Still open: {name} has not answered yet (`pair cancel` ends it).",
    ("incoming", "pending"): "Still open: type the PIN with `pair accept`, or `pair decline`.",
    ("outgoing", "wrong-pin"): "Wrong PIN: the PIN typed on {name} did not match. A PIN is good "
    "for one try: `pair invite {target}` shows a new one.",
    ("incoming", "wrong-pin"): "Wrong PIN: it did not match the PIN {name} shows. A PIN is good "
    "for one try: invite this computer again from {name} for a new one.",
    ("outgoing", "not-accepting"): "Not accepting invites: {name} takes invites only while "
    "its user asks to join. On {name}, run `pair join` (or choose “Join a cluster…” on its "
    "Cluster page), then `pair invite {target}` again.",
    ("outgoing", "declined"): "Declined: {name} declined the invite.",
    ("incoming", "declined"): "Declined: the invite from {name} was declined.",
    ("outgoing", "canceled"): "Canceled: the invite to {name} was canceled; "
    "`pair invite {target}` sends a new one.",
    ("incoming", "canceled"): "Canceled: {name} canceled its invite.",
    ("outgoing", "expired"): "Expired: nobody typed the PIN on {name} within 5 minutes; "
    "`pair invite {target}` sends a new one.",
    ("incoming", "expired"): "Expired: the invite from {name} ran out after 5 minutes; "
    "invite this computer again from {name}.",
    ("outgoing", "failed"): "Failed: {reason}. Check the address and that PAIR runs on {name}, "
    "then `pair invite {target}` again.",
    ("incoming", "failed"): "Failed: {reason}. Invite this computer again from {name}.",
    ("outgoing", "locked-out"): "Locked out: {reason}. Wait, then invite again.",
}
BUSY_HERE = (
    "Busy: this computer already has an open invite ({other}). Finish it, or end it with "
    "`pair cancel` / `pair decline`, then invite again."
)


# -- parsing ------------------------------------------------------------------------------------


class Target(msgspec.Struct, frozen=True):
    """The computer to invite: an IP address (IPv6 without brackets) or a hostname, and a port."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_target(text: str, port_option: int | None = None) -> Target:
    """``ADDRESS[:PORT]`` (IPv4, ``[IPv6]:PORT`` or plain IPv6, hostname) and ``--port``;
    raises ``ValueError`` saying what is wrong and how to write it."""
    text = text.strip()
    if not text:
        raise ValueError("give the other computer's address, e.g. 192.168.1.20 or bob.local")
    if "/" in text or "@" in text:
        raise ValueError(f"{text!r} is not an address; give only ADDRESS[:PORT], e.g. 10.0.0.5")
    host, port_text = _split_port(text)
    _check_host(host, bracketed=text.startswith("["))
    port = port_option if port_text is None else parse_port(port_text)
    if port_option is not None and port_text is not None and port != port_option:
        raise ValueError(f"{text!r} says port {port} but --port says {port_option}: give one")
    return Target(host, DEFAULT_NODE_PORT if port is None else port)


def _split_port(text: str) -> tuple[str, str | None]:
    if text.startswith("["):
        found = re.fullmatch(r"\[([^\[\]]+)\](?::(.*))?", text)
        if found is None:
            raise ValueError(f"{text!r}: write an IPv6 address with a port as [2001:db8::5]:14320")
        return found[1], found[2]
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, port
    return text, None  # no colon, or a plain IPv6 address (which cannot carry a port)


def _check_host(host: str, *, bracketed: bool) -> None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if bracketed and address.version != 6:
            raise ValueError(f"[{host}]: brackets are for IPv6 addresses only")
        return
    if bracketed or ":" in host:
        raise ValueError(
            f"{host!r} is not a valid IPv6 address (with a port, write [2001:db8::5]:14320)"
        )
    labels = host.removesuffix(".").split(".")
    if all(label.isdigit() for label in labels):
        raise ValueError(f"{host!r} is not a valid IPv4 address (four numbers 0-255)")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{host!r} is not an IP address or a hostname")


def parse_port(text: str) -> int:
    """A TCP port 1-65535; raises ``ValueError`` saying what is wrong."""
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a port number (1-65535)")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1-65535")
    return port


def normalize_pin(text: str) -> str:
    """The six digits of ``text`` (spaces and dashes, as the PIN is shown, are dropped); raises
    ``ValueError`` with ``PIN_MESSAGE``, never repeating the input."""
    digits = re.sub(r"[\s-]", "", text)
    if _PIN.fullmatch(digits) is None:
        raise ValueError(PIN_MESSAGE)
    return digits


class Unresolved(Exception):
    """No invite, or more than one, matches what was given; the message says what to do."""


def resolve_invite(
    invites: Sequence[Invite], given: str | None, direction: InviteDirection, verb: str
) -> Invite:
    """The open invite of ``direction`` whose id is or starts with ``given`` (the only open one
    when ``given`` is None); raises ``Unresolved`` naming the next step."""
    open_ones = [i for i in invites if i.state == "pending" and i.direction == direction]
    if given is None:
        if len(open_ones) == 1:
            return open_ones[0]
        if not open_ones:
            raise Unresolved(f"no {direction} invite is open. {_how_to_get(invites, direction)}")
        raise Unresolved(
            f"{len(open_ones)} {direction} invites are open; name one: `pair {verb} ID` "
            "(`pair invites` lists them)"
        )
    prefix = given.strip().lower()
    matches = [i for i in open_ones if i.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(i.id[:SHORT_ID] for i in matches)
        raise Unresolved(f"{given!r} matches {len(matches)} invites ({ids}); give more of the id")
    raise Unresolved(_no_match(invites, prefix, given, direction))


def _no_match(
    invites: Sequence[Invite], prefix: str, given: str, direction: InviteDirection
) -> str:
    for invite in invites:
        if invite.id.startswith(prefix) and invite.direction != direction:
            other = "cancel" if invite.direction == "outgoing" else "accept` or `pair decline"
            return f"invite {given} is {invite.direction}: use `pair {other}` for it"
        if invite.id.startswith(prefix):
            return f"invite {given} is over ({WORDS[invite.state].lower()})"
    return f"no open {direction} invite has an id starting with {given!r} (`pair invites`)"


def _how_to_get(invites: Sequence[Invite], direction: InviteDirection) -> str:
    if any(i.state == "pending" and i.direction != direction for i in invites):
        if direction == "outgoing":
            return "The open one here is incoming: `pair accept` or `pair decline`."
        return "The open one here is outgoing: `pair cancel`."
    if direction == "incoming":
        return (
            "Run `pair join` here, then start one on the other computer: `pair invite ADDRESS` "
            "with this computer's address."
        )
    return "`pair invite ADDRESS` sends one."


# -- formatting ---------------------------------------------------------------------------------


def format_pin(pin: str) -> str:
    """The PIN in groups of three, as it is read aloud: ``483 920``."""
    return " ".join(pin[i : i + 3] for i in range(0, len(pin), 3))


def short_fingerprint(fingerprint: str) -> str:
    """The first 16 hex digits after ``sha256:``."""
    return fingerprint.removeprefix("sha256:")[:SHORT_FINGERPRINT] or "-"


def describe_outcome(invite: Invite, target: str | None = None) -> str:
    """How ``invite`` ended, in words, with what to do next."""
    name = invite.peer_name or invite.peer_address
    if invite.state == "paired":
        return (
            f"Paired with {name}: it is a member of this cluster now "
            "(`pair cluster` lists the members)."
        )
    template = OUTCOMES.get((invite.direction, invite.state), "{word}: {reason}.")
    reason = (invite.reason or WORDS[invite.state].lower()).rstrip(".")
    return template.format(
        name=name, target=target or invite.peer_address, reason=reason, word=WORDS[invite.state]
    )


def expires_in(invite: Invite, now: float) -> str:
    """``4m12s``; ``now`` once the time is up."""
    left = int(invite.expires_at - now)
    if left <= 0:
        return "now"
    minutes, seconds = divmod(left, 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def format_cluster(status: ClusterStatus, now: float) -> str:
    """``pair cluster``: identity, cluster, the members, then the open invites."""
    lines = [
        f"this node    {status.node_id}",
        f"fingerprint  {status.fingerprint}",
        f"key          {_protection(status.key_protection)}",
    ]
    if status.cluster_id is None:
        lines.append(
            "cluster      not in a cluster (`pair invite ADDRESS` starts one; `pair join` lets "
            "another computer invite this one)"
        )
    else:
        lines.append(f"cluster      {status.cluster_name or '-'} ({status.cluster_id})")
    if status.removed is not None:
        removed = status.removed
        lines.append(
            f"removed      from {removed.cluster_name or removed.cluster_id} by {removed.by_name} "
            f"on {_when(removed.at)}; that cluster refuses this computer's identity for good"
        )
    if status.join_window is not None:
        window = format_join_window(status.join_window, now)
        lines.append(f"join window  open {window}: other computers may invite this one")
    lines += ["", format_members(status.members), "", format_invites(status.invites, now)]
    return "\n".join(lines)


def format_join_window(window: JoinWindow, now: float) -> str:
    """How long this computer still accepts invites, and until when: ``9m58s more (until …)``."""
    left = max(0, int(window.closes_at - now))
    minutes, seconds = divmod(left, 60)
    until = time.strftime("%H:%M:%S", time.localtime(window.closes_at))
    return f"{minutes}m{seconds:02d}s more (until {until})"


def _protection(kind: str) -> str:
    if kind == "keyring":
        return "encrypted; its passphrase is in the OS keyring"
    return "a plain 0600 file (no OS keyring here)"


def format_members(members: Sequence[ClusterMember]) -> str:
    """The members table (other computers; this one is described above it)."""
    if not members:
        return "no other members"
    lines = [
        f"{'NAME':<20}{'NODE ID':<10}{'ADDRESS:PORT':<24}{'FINGERPRINT':<18}{'STATE':<13}ADDED"
    ]
    for member in members:
        where = str(Target(member.address, member.node_port))
        added = _when(member.added_at)
        lines.append(
            f"{_fit(member.name, 19):<20}{member.node_id[:SHORT_ID]:<10}{where:<24}"
            f"{short_fingerprint(member.fingerprint):<18}{member.state:<13}{added}"
        )
    return "\n".join(lines)


def format_invites(invites: Sequence[Invite], now: float) -> str:
    """The open invites table, both directions."""
    open_ones = [invite for invite in invites if invite.state == "pending"]
    if not open_ones:
        return "no open invites"
    lines = [
        f"{'INVITE':<10}{'DIRECTION':<11}{'PEER':<20}{'ADDRESS':<24}{'FINGERPRINT':<18}EXPIRES IN"
    ]
    for invite in open_ones:
        lines.append(
            f"{invite.id[:SHORT_ID]:<10}{invite.direction:<11}{_fit(invite.peer_name, 19):<20}"
            f"{_fit(invite.peer_address, 23):<24}{short_fingerprint(invite.peer_fingerprint):<18}"
            f"{expires_in(invite, now)}"
        )
    if any(invite.direction == "incoming" for invite in open_ones):
        lines += ["", "Type the PIN shown on the other computer with `pair accept`."]
    return "\n".join(lines)


def format_invite_opened(invite: Invite, pin: str, *, big: bool) -> str:
    """What ``pair invite`` shows while it waits: the PIN, who it is for, until when."""
    name = invite.peer_name or invite.peer_address
    expiry = time.strftime("%H:%M:%S", time.localtime(invite.expires_at))
    lines = [
        f"Invited {name} at {invite.peer_address} "
        f"(fingerprint {short_fingerprint(invite.peer_fingerprint)}).",
        "",
        *(f"    {row}" for row in (big_digits(pin) if big else [])),
        f"    PIN  {format_pin(pin)}",
        "",
        f"Type this PIN on {name} (pair accept, or the PAIR window there).",
        f"It expires at {expiry}, in 5 minutes. Waiting; Ctrl+C cancels the invite.",
    ]
    return "\n".join(lines)


_FONT = {
    "0": ("###", "# #", "# #", "# #", "###"),
    "1": ("  #", "  #", "  #", "  #", "  #"),
    "2": ("###", "  #", "###", "#  ", "###"),
    "3": ("###", "  #", "###", "  #", "###"),
    "4": ("# #", "# #", "###", "  #", "  #"),
    "5": ("###", "#  ", "###", "  #", "###"),
    "6": ("###", "#  ", "###", "# #", "###"),
    "7": ("###", "  #", "  #", "  #", "  #"),
    "8": ("###", "# #", "###", "# #", "###"),
    "9": ("###", "# #", "###", "  #", "###"),
}


def big_digits(pin: str) -> list[str]:
    """``pin`` in five rows of block digits, groups of three apart (ASCII, for any terminal)."""
    rows = []
    for row in range(5):
        groups = [
            " ".join(_FONT[d][row].replace("#", "##").replace(" ", "  ") for d in pin[i : i + 3])
            for i in range(0, len(pin), 3)
        ]
        rows.append("    ".join(groups).rstrip())
    return rows


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def resolve_member(status: ClusterStatus, given: str) -> ClusterMember:
    """The member whose node id is or starts with ``given``, or whose name is ``given`` (any
    case); raises ``Unresolved`` naming the next step."""
    text = given.strip()
    if text and status.node_id.startswith(text.lower()):
        raise Unresolved(f"{given} is this computer: `pair leave` takes it out of the cluster")
    found = {m.node_id: m for m in status.members if m.name.casefold() == text.casefold()}
    found |= {m.node_id: m for m in status.members if text and m.node_id.startswith(text.lower())}
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise Unresolved(f"no member has the node id or name {given!r} (`pair cluster` lists them)")
    named = ", ".join(f"{m.name} ({m.node_id[:SHORT_ID]})" for m in found.values())
    raise Unresolved(f"{given!r} matches {len(found)} members ({named}); give more of the node id")


def describe_removed(removed: MemberRemoved) -> str:
    """What ``pair remove`` did."""
    return (
        f"Removed {removed.name} ({removed.node_id[:SHORT_ID]}, fingerprint "
        f"{short_fingerprint(removed.fingerprint)}) for good: the cluster never trusts that "
        f"identity again. The other members and {removed.name} are told in the background."
    )


def describe_left(left: ClusterLeft, status: ClusterStatus) -> str:
    """What ``pair leave`` did; ``status`` (from before) names the members."""
    names = {member.node_id: member.name for member in status.members}
    lines = [
        f"Left the cluster {status.cluster_name or left.cluster_id}: this computer trusts no "
        "other now; a new invite is the way back."
    ]
    if left.told:
        lines.append("Told: " + ", ".join(names.get(n, n[:SHORT_ID]) for n in left.told) + ".")
    if left.not_told:
        missed = ", ".join(names.get(n, n[:SHORT_ID]) for n in left.not_told)
        lines.append(
            f"Not reached in time: {missed}. They may list this computer until they hear of it; "
            f"if one keeps it, `pair remove {status.node_id[:SHORT_ID]}` there."
        )
    return "\n".join(lines)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
