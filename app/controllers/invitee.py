"""The invited side of pairing: an incoming invite waits here for the PIN shown on the other
computer; ``cluster:accept`` answers it with the PIN, ``cluster:decline`` refuses it. The
sentences the prompt shows are plain functions here.

Follows the cluster store: an incoming ``pending`` invite (pushed, or in a snapshot) asks once
for its prompt (``prompt_requested``); from then on every change to it, whatever told the news
(a push, a snapshot, the answer to accept or decline), comes as ``invite_updated``, and an
invite that ended stays as it ended. The prompt itself is ``app/window/invitee_prompt.py``.
"""

from __future__ import annotations

import html
import logging
import math
from collections import deque

import msgspec
from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.fingerprint import SHORT_DIGITS, grouped
from app.stores.cluster import ClusterStore
from backend.protocol import methods
from backend.protocol.errors import CallTimeout, Conflict, InvalidParams, NotFound, RpcError
from backend.protocol.types.base import InviteId
from backend.protocol.types.cluster import Invite, InviteAnswer, InviteRef

log = logging.getLogger(__name__)

# The pairing runs while cluster:accept waits: a few round trips to the other computer, each
# bounded by the broker (10 s); decline only ends the invite here (the inviter is not told).
ACCEPT_TIMEOUT_S = 60.0
DECLINE_TIMEOUT_S = 30.0
ENDED_REMEMBERED = 64  # ended invites never prompted again; older ones are long gone
RESTARTED = "the PAIR service restarted, which ends every open invite"
GONE = "this computer no longer holds that invite"
OVER = "that invite is over: "  # how the broker's -32002 begins; the rest is the reason
PIN_LENGTH = 6


def peer_label(invite: Invite) -> str:
    """Who invites: the other computer's name, or its address when it has none."""
    return invite.peer_name or invite.peer_address


def pin_digits(text: str) -> str:
    """The decimal digits in ``text`` as ASCII 0-9 (a full-width ``３`` too); the rest dropped."""
    return "".join(str(int(char)) for char in text if char.isdecimal())


def group_fingerprint(fingerprint: str) -> str:
    """The first 16 hex digits after ``sha256:`` in fours: ``3f2a 9c1b 77de 0a41``."""
    return grouped(fingerprint, digits=SHORT_DIGITS) or "unknown"


def countdown_text(seconds_left: float) -> str:
    """``4:59``; ``0:00`` once the time is up (a part of a second counts as a second)."""
    minutes, seconds = divmod(max(0, math.ceil(seconds_left)), 60)
    return f"{minutes}:{seconds:02d}"


def invite_headline(invite: Invite) -> str:
    """``Ada invites this computer to its cluster`` (the prompt's heading, the tray message)."""
    return f"{peer_label(invite)} invites this computer to its cluster"


def fingerprint_hint(name: str, own_fingerprint: str | None) -> str:
    """What to compare before joining (rich text)."""
    who = html.escape(name)
    grouped = group_fingerprint(own_fingerprint or "").replace(" ", "&nbsp;")  # one piece
    if not own_fingerprint:
        return f"Join only if you asked for this invite on {who}."
    return (
        f"{who} shows this computer's fingerprint, <tt>{grouped}</tt>, "
        "next to the PIN. Join only if it matches and you asked for this invite there."
    )


def outcome_text(invite: Invite) -> str:
    """How an invite ended, in words, with what to do next; "" while it is open."""
    name = peer_label(invite)
    again = f"Ask for a new invite on {name}."
    match invite.state:
        case "pending":
            return ""
        case "paired":
            return f"You joined {name}'s cluster."
        case "wrong-pin":
            return f"That PIN was wrong. {again}"
        case "expired":
            return f"The invite ran out of time. {again}"
        case "canceled":
            return f"{name} canceled the invite."
        case "declined":
            return f"You declined the invite from {name}."
        case _ if invite.reason == RESTARTED:
            return f"The PAIR service restarted, which ends every open invite. {again}"
    reason = (invite.reason or "pairing failed").rstrip(".")
    return f"Could not join {name}'s cluster: {reason}."


def answer_error(invite: Invite, exc: RpcError) -> str:
    """A failed ``cluster:accept`` or ``cluster:decline`` in words (the invite stays open)."""
    if isinstance(exc, InvalidParams):
        return f"The PIN is six digits (0-9), as shown on {peer_label(invite)}."
    if isinstance(exc, CallTimeout):
        return (
            f"{peer_label(invite)} took too long to answer. If nothing changes here, ask for a "
            "new invite there."
        )
    return f"No answer from the PAIR service ({exc.message}). Try again."


class InviteeController(Controller):
    """Answers the invites this computer received. ``prompt_requested`` (invite id) once per
    incoming pending invite; ``invite_updated`` (``Invite``) whenever one of those moved on;
    ``answering_changed`` (invite id) when an accept or decline call starts or ends
    (``answering``); ``answer_failed`` (invite id, sentence) when such a call failed and the
    invite may still be open. Owns its accept and decline tasks."""

    prompt_requested = Signal(str)  # InviteId
    invite_updated = Signal(object)  # Invite
    answering_changed = Signal(str)  # InviteId
    answer_failed = Signal(str, str)  # InviteId, a sentence

    def __init__(
        self, connection: BrokerConnection, cluster: ClusterStore, parent: QObject | None = None
    ) -> None:
        super().__init__(connection, parent)
        self.cluster = cluster
        # Invites a prompt was asked for, as last seen, while open; an ended one moves to
        # ``_ended`` (ids only), so a stranger's stream of invites cannot grow either for good.
        self._prompted: dict[InviteId, Invite] = {}
        self._ended: deque[InviteId] = deque(maxlen=ENDED_REMEMBERED)
        self._answering: set[InviteId] = set()
        cluster.invite_received.connect(self._on_cluster_invite_received)
        cluster.invite_changed.connect(self._on_cluster_invite_changed)
        cluster.status_changed.connect(self._on_cluster_status_changed)
        cluster.reset.connect(self._on_cluster_reset)

    def invite(self, invite_id: InviteId) -> Invite | None:
        """An invite a prompt was asked for, as last told."""
        return self._prompted.get(invite_id)

    def answering(self, invite_id: InviteId) -> bool:
        """Whether an accept or decline of ``invite_id`` is under way."""
        return invite_id in self._answering

    def own_fingerprint(self) -> str | None:
        """This computer's certificate fingerprint (the inviter's screen shows it), if known."""
        status = self.cluster.status
        return status.fingerprint if status is not None else None

    def accept(self, invite_id: InviteId, pin: str) -> None:
        """Answer ``invite_id`` with ``pin``; how it ended comes as ``invite_updated``."""
        self._answer(invite_id, "accept", pin)

    def decline(self, invite_id: InviteId) -> None:
        """Refuse ``invite_id`` (the inviter is not told: its invite runs out); the outcome
        comes as ``invite_updated``."""
        self._answer(invite_id, "decline", None)

    # Calls -----------------------------------------------------------------------------------

    def _answer(self, invite_id: InviteId, verb: str, pin: str | None) -> None:
        invite = self._prompted.get(invite_id)
        if invite is None or invite.state != "pending" or invite_id in self._answering:
            return
        self._answering.add(invite_id)
        self.answering_changed.emit(invite_id)
        self._tasks.spawn(self._call(invite, pin), name=f"{verb}:{invite_id}")

    async def _call(self, invite: Invite, pin: str | None) -> None:
        try:
            if pin is None:
                ref = InviteRef(id=invite.id)
                ended = await self.connection.call(methods.CLUSTER_DECLINE, ref, DECLINE_TIMEOUT_S)
            else:
                answer = InviteAnswer(id=invite.id, pin=pin)
                ended = await self.connection.call(methods.CLUSTER_ACCEPT, answer, ACCEPT_TIMEOUT_S)
        except (NotFound, Conflict) as exc:
            # The invite is over: a push has usually said how already; if not, say why here.
            log.info("answering invite %s: %s", invite.id, exc)
            known = self.cluster.invite(invite.id)
            reason = GONE if isinstance(exc, NotFound) else exc.message.removeprefix(OVER)
            over = msgspec.structs.replace(invite, state="failed", reason=reason)
            self._update(known if known is not None and known.state != "pending" else over)
        except RpcError as exc:
            log.info("answering invite %s failed: %s", invite.id, exc)
            self.answer_failed.emit(invite.id, answer_error(invite, exc))
        else:
            self._update(ended)
        finally:
            self._answering.discard(invite.id)
            self.answering_changed.emit(invite.id)

    # Store -----------------------------------------------------------------------------------

    def _on_cluster_invite_received(self, invite_id: InviteId) -> None:
        invite = self.cluster.invite(invite_id)
        if invite is not None:
            self._offer(invite)

    def _on_cluster_invite_changed(self, invite_id: InviteId) -> None:
        invite = self.cluster.invite(invite_id)
        if invite is not None and invite_id in self._prompted:
            self._update(invite)

    def _on_cluster_status_changed(self) -> None:
        # A membership change carries the invites too (a pairing ends one as it adds a member).
        for invite_id in list(self._prompted):
            invite = self.cluster.invite(invite_id)
            if invite is not None:
                self._update(invite)

    def _on_cluster_reset(self) -> None:
        for invite_id, last in list(self._prompted.items()):
            invite = self.cluster.invite(invite_id)
            if invite is not None:
                self._update(invite)
            elif last.state == "pending":
                # The broker keeps invites in memory only: a snapshot without it means it is gone.
                self._update(msgspec.structs.replace(last, state="failed", reason=RESTARTED))
        for invite in self.cluster.pending_incoming():
            self._offer(invite)

    def _offer(self, invite: Invite) -> None:
        """Ask for a prompt for an incoming pending invite, once."""
        if invite.id in self._prompted:
            self._update(invite)
            return
        if invite.direction != "incoming" or invite.state != "pending" or invite.id in self._ended:
            return
        self._prompted[invite.id] = invite
        self.prompt_requested.emit(invite.id)

    def _update(self, invite: Invite) -> None:
        """Pass on news of a prompted invite; an ended invite stays as it ended."""
        last = self._prompted.get(invite.id)
        if last is None or last.state != "pending" or invite == last:
            return
        if invite.state == "pending":
            self._prompted[invite.id] = invite
        else:  # the prompt keeps its own copy to show how it ended
            del self._prompted[invite.id]
            self._ended.append(invite.id)
        self.invite_updated.emit(invite)
