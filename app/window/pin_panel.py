"""The PIN panel of the Add node dialog: the six digits to type on the other computer, large
enough to read aloud, a countdown to the invite's expiry, who is being invited, Cancel, and
how the invite ended in plain words."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

import msgspec
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.controllers.add_node import AddNodeController
from app.fingerprint import SHORT_DIGITS, grouped
from app.window.look import State
from app.window.widgets import SPACE_SECTION, fixed_font, muted_label, page_title, tint
from backend.protocol.types.base import InviteId
from backend.protocol.types.cluster import Invite, InviteCreated, InviteState

Tone = Literal["good", "bad", "neutral"]
TONE_STATES: dict[Tone, State] = {"good": State.OK, "bad": State.ERROR}
PIN_POINT_SIZE = 40


class Outcome(msgspec.Struct, frozen=True):
    """How an invite ended, for a person: a headline, a sentence more, and whether a new
    invite to the same computer makes sense."""

    headline: str
    detail: str
    retry: bool
    tone: Tone


def format_pin(pin: str) -> str:
    """``482 913``: two groups of three are easier to read aloud and to type."""
    return f"{pin[:3]} {pin[3:]}" if len(pin) == 6 else pin


def format_countdown(seconds: float) -> str:
    """``4:59``: whole seconds left (``0:00`` in the last one, as a kitchen timer does)."""
    left = max(0, math.floor(seconds))
    minutes, seconds_part = divmod(left, 60)
    return f"{minutes}:{seconds_part:02d}"


def short_fingerprint(fingerprint: str) -> str:
    """``3f2a 9c01 77de 0b45``: the first 16 hex digits of ``sha256:…``, in groups of four."""
    return grouped(fingerprint, digits=SHORT_DIGITS)


def _sentence(text: str, name: str) -> str:
    """The broker's reason as a sentence; a computer's name at its start keeps its spelling."""
    text = text.strip()
    if not text:
        return ""
    if not text.startswith(name):
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def describe_outcome(invite: Invite) -> Outcome:
    """The words for an invite that ended (``pending`` reads as waiting)."""
    name = invite.peer_name or invite.peer_address
    reason = _sentence(invite.reason or "", name)
    match invite.state:
        case "paired":
            detail = f"{name} is now a member of this cluster."
            return Outcome(f"Paired with {name}", detail, retry=False, tone="good")
        case "wrong-pin":
            headline = f"The PIN typed on {name} was wrong."
            detail = "Start a new invite: a PIN works for one try only."
            return Outcome(headline, detail, retry=True, tone="bad")
        case "declined":
            detail = f"Someone on {name} chose not to join this cluster."
            return Outcome(f"{name} declined the invite", detail, retry=True, tone="bad")
        case "canceled":
            detail = f"The PIN no longer works, and {name} was told."
            return Outcome("Invite canceled", detail, retry=True, tone="neutral")
        case "expired":
            detail = f"Nobody typed it on {name} within 5 minutes. Start a new invite."
            return Outcome("The PIN expired", detail, retry=True, tone="bad")
        case "not-accepting":
            headline = f"{name} is not accepting invites"
            detail = (
                f"On {name}, open PAIR's Cluster page and choose Join a cluster… (or run "
                "pair join there), then try again."
            )
            return Outcome(headline, detail, retry=True, tone="neutral")
        case "rejected":
            headline = f"{name} is already in another cluster"
            detail = "It has to leave that cluster before it can join this one."
            return Outcome(headline, detail, retry=False, tone="bad")
        case "busy":
            detail = reason or f"{name} is pairing with another computer. Try again in a minute."
            return Outcome("Another pairing is under way", detail, retry=True, tone="bad")
        case "locked-out":
            # No line break inside "15 minutes" (the headline is large and may wrap).
            headline = "Too many wrong PINs: inviting is paused for 15\u00a0minutes"
            detail = "Someone may have been guessing. Try again later."
            return Outcome(headline, detail, retry=False, tone="bad")
        case "failed":
            detail = reason or "No reason was given."
            return Outcome(f"Pairing with {name} failed", detail, retry=True, tone="bad")
    return Outcome(f"Type this PIN on {name}", f"Waiting for {name}…", retry=False, tone="neutral")


def _pin_font() -> QFont:
    font = fixed_font()
    font.setPointSize(PIN_POINT_SIZE)
    font.setBold(True)
    font.setLetterSpacing(QFont.SpacingType.AbsoluteSpacing, 6)
    return font


class PinPanel(QWidget):
    """One outgoing invite: ``show_inviting`` while ``cluster:invite`` runs, then
    ``show_invite`` with its answer; later states arrive from the controller's
    ``invite_updated``. ``close_requested`` when Close is clicked after the end,
    ``invite_again_requested`` for Invite again. ``clock`` is wall time (Unix seconds), as the
    invite's ``expires_at``; the countdown reads it every second."""

    close_requested = Signal()
    invite_again_requested = Signal()

    def __init__(
        self,
        controller: AddNodeController,
        parent: QWidget | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self._clock = clock
        self._invite: Invite | None = None
        self._pin = ""
        self._cancel_wanted = False
        self._canceling = False
        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.tick)
        self._build()
        controller.invite_updated.connect(self._on_controller_invite_updated)
        controller.cancel_failed.connect(self._on_controller_cancel_failed)

    def _build(self) -> None:
        self.heading = page_title("")
        self.pin_label = QLabel()
        self.pin_label.setFont(_pin_font())
        self.pin_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.countdown_label = muted_label()
        self.peer_label = muted_label()
        self.peer_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.detail_label = QLabel()
        self.detail_label.setWordWrap(True)
        self.hint_label = muted_label()
        self.again_button = QPushButton("Invite again")
        self.again_button.clicked.connect(self.invite_again_requested)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.peer_label.setToolTip(
            "The other computer's certificate fingerprint, as it answered here. PAIR on that "
            "computer shows its own (pair status), to compare."
        )
        layout = QVBoxLayout(self)
        layout.setSpacing(SPACE_SECTION)
        layout.addStretch(1)  # with the one below: the panel's content sits in the middle
        for label in (
            self.heading,
            self.pin_label,
            self.countdown_label,
            self.detail_label,
            self.hint_label,
            self.peer_label,
        ):
            label.setAlignment(Qt.AlignmentFlag.AlignHCenter)
            label.setWordWrap(label is not self.pin_label)
            layout.addWidget(label)
        layout.addStretch(1)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.again_button)
        buttons.addWidget(self.cancel_button)
        layout.addLayout(buttons)

    # What the dialog calls -------------------------------------------------------------------

    @property
    def invite(self) -> Invite | None:
        """The invite shown, as last told (None while it is being opened)."""
        return self._invite

    @property
    def ended(self) -> bool:
        """Whether the invite is over (by the broker's word, or its time ran out here)."""
        return self._invite is not None and self._shown_state() != "pending"

    @property
    def open(self) -> bool:
        """Whether an invite is open or being opened, so closing the dialog should cancel it."""
        return self._invite is None or self._invite.state == "pending"

    def show_inviting(self, name: str) -> None:
        """``cluster:invite`` is under way for ``name``: no PIN yet."""
        self._invite = None
        self._pin = ""
        self._cancel_wanted = self._canceling = False
        self.timer.stop()
        self.heading.setText(f"Inviting {name}…")
        tint(self.heading, None)
        for label in (self.pin_label, self.countdown_label, self.peer_label):
            label.hide()
        self._set_detail(f"Asking {name} to get ready for a PIN.", None)
        self.hint_label.hide()
        self._set_buttons(ended=False)

    def show_invite(self, created: InviteCreated) -> None:
        """The invite's answer: its PIN (``""`` when it ended at once) and its state."""
        self._invite = created.invite
        self._pin = created.pin
        if self._cancel_wanted and created.invite.state == "pending":
            self._request_cancel()
        self._render()

    def cancel(self) -> None:
        """Cancel the invite shown, or the one being opened as soon as it has an id."""
        if self.ended or self._canceling:
            return
        if self._invite is None:
            self._cancel_wanted = True  # cancel as soon as the invite has an id
            self._canceling = True
            self._set_detail("Canceling the invite…", None)
            self._set_buttons(ended=False)
        else:
            self._request_cancel()
            self._render()

    def tick(self) -> None:
        """Count down. Once the time is up the invite shows as expired, until the broker says
        how it ended (a pairing that finished in the last moment is still paired)."""
        self._render()

    # Rendering -------------------------------------------------------------------------------

    def _shown_state(self) -> InviteState:
        invite = self._invite
        if invite is None:
            return "pending"
        if invite.state == "pending" and self._clock() >= invite.expires_at:
            return "expired"  # the broker's own timer says so too, a moment later
        return invite.state

    def _render(self) -> None:
        invite = self._invite
        if invite is None:
            return
        name = invite.peer_name or invite.peer_address
        fingerprint = short_fingerprint(invite.peer_fingerprint)
        parts = (name, invite.peer_address, fingerprint and f"fingerprint {fingerprint}")
        peer = " · ".join(part for part in parts if part)
        self.peer_label.setText(peer)
        self.peer_label.show()
        if self.ended:
            self._render_end(invite)
        else:
            self._render_pending(invite, name)

    def _render_pending(self, invite: Invite, name: str) -> None:
        left = invite.expires_at - self._clock()
        self.heading.setText(f"Type this PIN on {name}")
        tint(self.heading, None)
        self.pin_label.setText(format_pin(self._pin))
        self.pin_label.show()
        self.countdown_label.setText(f"Expires in {format_countdown(left)}")
        self.countdown_label.show()
        if self._canceling:
            self._set_detail("Canceling the invite…", None)
        else:
            self._set_detail(f"Waiting for someone to type it on {name}…", None)
        self.hint_label.setText(
            f"PAIR on {name} asks for this PIN. It works once, for this invite only."
        )
        self.hint_label.show()
        self._set_buttons(ended=False)
        if not self.timer.isActive():
            self.timer.start()

    def _render_end(self, invite: Invite) -> None:
        self.timer.stop()
        state = self._shown_state()
        shown = invite if state == invite.state else msgspec.structs.replace(invite, state=state)
        outcome = describe_outcome(shown)
        self.heading.setText(outcome.headline)
        tint(self.heading, TONE_STATES.get(outcome.tone))
        for label in (self.pin_label, self.countdown_label, self.hint_label):
            label.hide()
        self._set_detail(outcome.detail, None)
        self._set_buttons(ended=True, retry=outcome.retry)

    def _set_detail(self, text: str, state: State | None) -> None:
        self.detail_label.setText(text)
        tint(self.detail_label, state)

    def _set_buttons(self, *, ended: bool, retry: bool = False) -> None:
        self.cancel_button.setText("Close" if ended else "Cancel")
        self.cancel_button.setEnabled(ended or not self._canceling)
        self.again_button.setVisible(ended and retry)

    # Slots -----------------------------------------------------------------------------------

    def _on_cancel_button_clicked(self) -> None:
        if self.ended:
            self.close_requested.emit()
        else:
            self.cancel()

    def _request_cancel(self) -> None:
        assert self._invite is not None
        self._canceling = True
        self._controller.cancel(self._invite.id)

    def _on_controller_invite_updated(self, invite: Invite) -> None:
        if self._invite is not None and invite.id == self._invite.id:
            self._invite = invite
            self._render()

    def _on_controller_cancel_failed(self, invite_id: InviteId, message: str) -> None:
        if self._invite is None or invite_id != self._invite.id:
            return
        self._canceling = False
        self._render()
        if not self.ended:
            self._set_detail(message, State.ERROR)
