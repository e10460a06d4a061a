"""Invites as plain data and the rules that end them: expiry, lockout per invited computer.

An invite is one attempt to pair with one other computer. Its outcome is a state, never an
error: ``pending`` until it ends as ``paired``, ``wrong-pin``, ``declined``, ``canceled``,
``expired``, ``rejected`` (the other computer is in another cluster), ``busy`` (it is pairing
with someone else), ``locked-out``, ``not-accepting`` (its user has not opened its join window)
or ``failed`` (it could not be reached, or broke the protocol). Both sides keep invites in
memory only: a restart forgets them, and a new PIN is needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from backend.protocol.types.cluster import Invite, InviteState

INVITE_TTL_S = 300.0
# Repeated wrong PINs suggest someone is guessing: refuse new pairings for a while.
LOCKOUT_FAILURES = 3
LOCKOUT_WINDOW_S = 3600.0
LOCKOUT_S = 900.0

TERMINAL: frozenset[InviteState] = frozenset(
    {
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
    }
)

REASONS: dict[InviteState, str] = {
    "paired": "paired",
    "wrong-pin": "the PIN was wrong; send a new invite to try again",
    "declined": "the other computer declined the invite",
    "canceled": "the invite was canceled",
    "expired": "the invite expired after 5 minutes; send a new one",
    "rejected": "that computer is already in another cluster; it must leave it first",
    "busy": "that computer is pairing with another one; try again in a few minutes",
    "locked-out": (
        "pairing is paused for 15 minutes after repeated wrong PINs (someone may be guessing)"
    ),
    "failed": "pairing failed",
    "not-accepting": "that computer is not accepting invites",
}


def finish(invite: Invite, state: InviteState, reason: str | None = None) -> Invite:
    """``invite`` ended as ``state``; an invite that already ended keeps its outcome."""
    if invite.state in TERMINAL:
        return invite
    return msgspec.structs.replace(invite, state=state, reason=reason or REASONS[state])


def expire_due(invites: Sequence[Invite], now: float) -> list[Invite]:
    """Pending invites whose time is up, as expired."""
    return [finish(i, "expired") for i in invites if i.state == "pending" and now >= i.expires_at]


def pending(invites: Sequence[Invite]) -> list[Invite]:
    """The invites still open."""
    return [invite for invite in invites if invite.state == "pending"]


def locked_until(failures: Sequence[float], now: float) -> float | None:
    """When the lockout ends, if ``failures`` (times of wrong-PIN endings with one invited
    computer) put us in one."""
    recent = sorted(t for t in failures if now - t < LOCKOUT_WINDOW_S)
    if len(recent) < LOCKOUT_FAILURES:
        return None
    until = recent[-1] + LOCKOUT_S
    return until if now < until else None


def recent_failures(failures: Sequence[float], now: float) -> list[float]:
    """The ``failures`` that still count towards a lockout at ``now``."""
    return [t for t in failures if now - t < LOCKOUT_WINDOW_S]
