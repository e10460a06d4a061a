"""The invitee prompt: another computer invites this one to its cluster; the user compares the
fingerprints, types the six-digit PIN shown there and joins, or declines.

``InviteePrompts`` opens one ``InviteePrompt`` per invite the ``InviteeController`` asks for,
raises it, and says so in the tray while the main window is hidden. One prompt is open at a
time: a new invite replaces a prompt that only shows how an earlier invite ended, and waits
(queued, oldest first; the open prompt says so) while the open one still wants a PIN, opening
when that one is closed if it is still open then. Closing a prompt without Join or Decline
leaves the invite open until it expires; ``show_invite`` opens it again (a Cluster page's
"Type the PIN" action, say).

Wiring (``app/application.py``, the composition root), after the cluster store, the main window
and the tray exist::

    self.invitee = InviteeController(connection, self.cluster_store)
    self.invitee_prompts = InviteePrompts(self.invitee, self.window, self.tray)

add ``self.invitee`` to ``_controllers()`` (closed on shutdown, ``command_failed`` reaches the
status bar), and in ``shutdown`` call ``self.invitee_prompts.close_all()`` next to hiding the
other windows. ``self.tray`` may be None (no system tray): the prompt is still raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import msgspec
from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
)

from app.controllers.invitee import (
    PIN_LENGTH,
    InviteeController,
    countdown_text,
    fingerprint_hint,
    group_fingerprint,
    invite_headline,
    outcome_text,
    peer_label,
)
from app.window.look import State
from app.window.pin_boxes import PinBoxes
from app.window.widgets import (
    DIALOG_MARGINS,
    SPACE,
    SPACE_SECTION,
    SPACE_TIGHT,
    fixed_font,
    muted_label,
    tint,
)
from backend.protocol.types.base import InviteId
from backend.protocol.types.cluster import Invite

TICK_MS = 250
Clock = Callable[[], float]  # Unix seconds, like an invite's expires_at


# Looks ---------------------------------------------------------------------------------------


def outcome_state(invite: Invite) -> State | None:
    """The result's state colour: green when paired, red when it failed, none when simply
    over."""
    if invite.state == "paired":
        return State.OK
    if invite.state in ("pending", "declined", "canceled"):
        return None
    return State.ERROR


# The dialog ----------------------------------------------------------------------------------


class InviteePrompt(QDialog):
    """One incoming invite: who invites (name, address, both fingerprints), the PIN boxes,
    Join and Decline, the time left, and how it ended. Renders what the controller says about
    the invite; Join and Decline are the controller's ``accept`` and ``decline``."""

    def __init__(
        self,
        controller: InviteeController,
        invite: Invite,
        clock: Clock = time.time,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.invite_id = invite.id
        self._invite = invite
        self._clock = clock
        self._expired_here = False  # the countdown ran out before the broker said so
        self._asked: str | None = None  # "Joining…" or "Declining…" while the call runs
        self._error = ""  # the last failed call, in words, until the PIN is edited
        self._shown_ended = False
        self.setWindowTitle("Join a cluster")
        self.setMinimumWidth(460)
        self._build(invite, controller.own_fingerprint())
        self._lay_out()
        self.pin.changed.connect(self._on_pin_changed)
        self.join_button.clicked.connect(self._on_join_button_clicked)
        self.decline_button.clicked.connect(self._on_decline_button_clicked)
        self.close_button.clicked.connect(self.close)
        paste = QShortcut(QKeySequence.StandardKey.Paste, self)
        paste.activated.connect(self._on_paste_shortcut_activated)
        controller.invite_updated.connect(self._on_controller_invite_updated)
        controller.answering_changed.connect(self._on_controller_answering_changed)
        controller.answer_failed.connect(self._on_controller_answer_failed)
        self._ticker = QTimer(self)
        self._ticker.setInterval(TICK_MS)
        self._ticker.timeout.connect(self.tick)
        self._ticker.start()
        self.tick()
        self._render()
        self.pin.focus_box(0)

    @property
    def invite(self) -> Invite:
        """The invite as shown (expired once the countdown ran out)."""
        if self._expired_here and self._invite.state == "pending":
            return msgspec.structs.replace(self._invite, state="expired")
        return self._invite

    @property
    def ended(self) -> bool:
        """Whether the prompt shows how the invite ended (no more PIN to type)."""
        return self.invite.state != "pending"

    def tick(self) -> None:
        """Show the time left; at 0:00 an invite nobody is answering has expired."""
        left = self._invite.expires_at - self._clock()
        self.countdown.setText(f"Expires in {countdown_text(left)}")
        answering = self.controller.answering(self.invite_id)
        if left <= 0 and not self.ended and not answering:
            self._expired_here = True
            self._render()

    def set_waiting(self, names: list[str]) -> None:
        """Say which other invites wait for this prompt to close (none: say nothing)."""
        if not names:
            self.waiting.hide()
            return
        who = ", ".join(names)
        self.waiting.setText(f"Also waiting: an invite from {who}. It opens when this one closes.")
        self.waiting.show()
        self._fit_height()

    def _build(self, invite: Invite, own_fingerprint: str | None) -> None:
        name = peer_label(invite)
        self.heading = QLabel(f"Invite from {name}")
        self.heading.setWordWrap(True)
        font = self.heading.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.heading.setFont(font)
        self.intro = muted_label(
            f"{invite_headline(invite)}. Computers in a cluster use each other's engines and "
            "models, and any of them can manage the others."
        )
        self.peer_fingerprint = _fingerprint_label(invite.peer_fingerprint)
        self.hint = muted_label(fingerprint_hint(name, own_fingerprint))
        self.hint.setTextFormat(Qt.TextFormat.RichText)
        self.instruction = QLabel(f"Type the PIN shown on {name}:")
        self.instruction.setWordWrap(True)
        self.pin = PinBoxes()
        self.countdown = muted_label()
        self.countdown.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note = QLabel()
        self.note.setWordWrap(True)
        # Room for two lines kept, so "Joining…" or an error does not squeeze the rest.
        self.note.setMinimumHeight(2 * self.note.fontMetrics().lineSpacing())
        self.note.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.waiting = muted_label()
        self.waiting.hide()
        self.buttons = QDialogButtonBox()
        self.decline_button = self.buttons.addButton(
            "Decline", QDialogButtonBox.ButtonRole.DestructiveRole
        )
        self.join_button = self.buttons.addButton("Join", QDialogButtonBox.ButtonRole.AcceptRole)
        self.close_button = self.buttons.addButton("Close", QDialogButtonBox.ButtonRole.RejectRole)
        self.close_button.hide()
        self.join_button.setDefault(True)

    def _lay_out(self) -> None:
        details = QFormLayout()
        details.setHorizontalSpacing(2 * SPACE)
        details.addRow("Computer", _plain(self._invite.peer_name or "(no name)"))
        details.addRow("Address", _plain(self._invite.peer_address))
        details.addRow("Fingerprint", self.peer_fingerprint)
        layout = self._layout = QVBoxLayout(self)
        layout.setContentsMargins(*DIALOG_MARGINS)
        layout.setSpacing(SPACE_SECTION)
        layout.addWidget(self.heading)
        layout.addWidget(self.intro)
        layout.addLayout(details)
        layout.addWidget(self.hint)
        layout.addSpacing(SPACE_TIGHT)
        entry: tuple[QWidget, ...] = (self.instruction, self.pin, self.countdown, self.note)
        for widget in (*entry, self.waiting):
            layout.addWidget(widget)
        layout.addStretch(1)
        layout.addWidget(self.buttons)

    def _render(self) -> None:
        if self.ended:
            self._render_ended(self.invite)
            return
        answering = self.controller.answering(self.invite_id)
        self.pin.setEnabled(not answering)
        self.join_button.setEnabled(not answering and self.pin.complete)
        self.decline_button.setEnabled(not answering)
        if answering and self._asked:
            self._show_note(self._asked, None)
        elif self._error:
            self._show_note(self._error, State.ERROR)
        else:
            self._show_note("", None)
        self._fit_height()

    def _render_ended(self, invite: Invite) -> None:
        self._show_note(outcome_text(invite), outcome_state(invite), bold=True)
        if self._shown_ended:
            return
        self._shown_ended = True
        self._ticker.stop()
        entry = (self.hint, self.instruction, self.pin, self.countdown)
        for widget in (*entry, self.join_button, self.decline_button):
            widget.hide()
        self.close_button.show()
        self.close_button.setDefault(True)
        self.close_button.setFocus()
        self.note.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._fit_height(shrink=True)  # what is left is shorter: leave no hole

    def _fit_height(self, *, shrink: bool = False) -> None:
        # Wrapped labels need more height when their text grows after the dialog was laid
        # out, and Qt does not grow a top-level window for that by itself. Measured once the
        # layout has taken the change in.
        QTimer.singleShot(0, self, lambda: self._resize_to_fit(shrink))

    def _resize_to_fit(self, shrink: bool) -> None:
        width = self.width()
        needed = self.heightForWidth(width) if self.hasHeightForWidth() else -1
        needed = max(needed, self.minimumSizeHint().height())
        if needed > self.height() or (shrink and needed < self.height()):
            self.resize(width, needed)

    def _show_note(self, text: str, state: State | None, *, bold: bool = False) -> None:
        self.note.setText(text)
        tint(self.note, state)
        font = self.note.font()
        font.setBold(bold)
        self.note.setFont(font)

    def _on_pin_changed(self) -> None:
        self._error = ""
        self._render()

    def _on_join_button_clicked(self) -> None:
        if self.pin.complete and not self.ended:
            self._asked = "Joining…"
            self._error = ""
            self.controller.accept(self.invite_id, self.pin.pin)

    def _on_decline_button_clicked(self) -> None:
        if not self.ended:
            self._asked = "Declining…"
            self._error = ""
            self.controller.decline(self.invite_id)

    def _on_paste_shortcut_activated(self) -> None:
        if not self.ended and self.pin.isEnabled():
            self.pin.paste(QGuiApplication.clipboard().text())

    def _on_controller_invite_updated(self, invite: Invite) -> None:
        if invite.id == self.invite_id:
            self._invite = invite
            self._render()

    def _on_controller_answering_changed(self, invite_id: InviteId) -> None:
        if invite_id == self.invite_id:
            self._render()
            if not self.ended and not self.controller.answering(invite_id):
                self.pin.focus_box(PIN_LENGTH - 1)

    def _on_controller_answer_failed(self, invite_id: InviteId, message: str) -> None:
        if invite_id == self.invite_id:
            self._error = message
            self._render()


def _plain(text: str) -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _fingerprint_label(fingerprint: str) -> QLabel:
    label = _plain(group_fingerprint(fingerprint))
    label.setFont(fixed_font())
    label.setToolTip(fingerprint or "not known yet")
    return label


# Showing it ----------------------------------------------------------------------------------


class TrayIconOwner(Protocol):
    """What the prompts use of the tray (``app.tray.Tray``): its icon, for messages."""

    @property
    def icon(self) -> QSystemTrayIcon:
        """The tray icon."""
        ...


def window_hidden(window: QWidget) -> bool:
    """Whether the main window is out of sight: hidden (in the tray) or minimised."""
    return not window.isVisible() or window.isMinimized()


def notify_if_hidden(window: QWidget, tray: TrayIconOwner | None, message: str) -> bool:
    """Put ``message`` in the tray while ``window`` is hidden; whether it did."""
    if tray is None or not window_hidden(window):
        return False
    tray.icon.showMessage("PAIR", message, QSystemTrayIcon.MessageIcon.Information, 15_000)
    return True


def present_prompt(
    prompt: QWidget, window: QWidget, tray: TrayIconOwner | None, message: str
) -> bool:
    """Show, raise and activate ``prompt``; while ``window`` is hidden, also put ``message``
    in the tray. Returns whether the tray message was shown."""
    if prompt.isMinimized():
        prompt.showNormal()
    prompt.show()
    prompt.raise_()
    prompt.activateWindow()
    QApplication.alert(prompt)  # where the window manager refuses focus, the taskbar flashes
    return notify_if_hidden(window, tray, message)


class InviteePrompts(QObject):
    """Opens a prompt for each invite the controller asks for, one at a time (see the module
    docstring for the queue), raised over ``window`` (or on its own while ``window`` is
    hidden) and announced in ``tray`` while ``window`` is hidden; a click on that message
    raises the prompt again. Owns the open prompt."""

    def __init__(
        self,
        controller: InviteeController,
        window: QWidget,
        tray: TrayIconOwner | None = None,
        clock: Clock = time.time,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self._window = window
        self._tray = tray
        self._clock = clock
        self.prompt: InviteePrompt | None = None  # the open one
        self._queue: list[InviteId] = []
        controller.prompt_requested.connect(self.show_invite)
        controller.invite_updated.connect(self._on_controller_invite_updated)
        if tray is not None:
            tray.icon.messageClicked.connect(self._on_tray_message_clicked)

    @property
    def queued(self) -> list[InviteId]:
        """Invites waiting for the open prompt to close, oldest first."""
        return list(self._queue)

    def show_invite(self, invite_id: InviteId) -> None:
        """Open (or raise) the prompt for ``invite_id``, or queue it behind an open prompt
        that still wants a PIN."""
        invite = self.controller.invite(invite_id)
        current = self.prompt
        if invite is None:
            return
        if current is not None and current.invite_id == invite_id:
            present_prompt(current, self._window, self._tray, invite_headline(invite))
        elif current is not None and not current.ended:
            if invite_id not in self._queue:
                self._queue.append(invite_id)
                self._refresh_waiting()
                notify_if_hidden(self._window, self._tray, invite_headline(invite))
        else:
            self._discard_prompt()
            self._open(invite)

    def close_all(self) -> None:
        """Close the open prompt and forget the queue (the invites stay open)."""
        self._queue.clear()
        self._discard_prompt()

    def _open(self, invite: Invite) -> None:
        # A prompt over a hidden window could stay hidden with it: then it stands alone.
        parent = None if window_hidden(self._window) else self._window
        prompt = InviteePrompt(self.controller, invite, self._clock, parent)
        # A bound method, not a lambda holding the prompt: that cycle crashes PySide when the
        # window deletes the prompt (its child) before the prompt's own deleteLater runs.
        prompt.finished.connect(self._on_prompt_finished)
        self.prompt = prompt
        self._refresh_waiting()
        present_prompt(prompt, self._window, self._tray, invite_headline(invite))

    def _discard_prompt(self) -> None:
        prompt, self.prompt = self.prompt, None
        if prompt is not None:
            prompt.finished.disconnect(self._on_prompt_finished)
            prompt.close()
            prompt.deleteLater()

    def _on_prompt_finished(self, _result: int) -> None:
        prompt, self.prompt = self.prompt, None
        if prompt is None:
            return
        prompt.deleteLater()
        while self._queue:
            invite = self.controller.invite(self._queue.pop(0))
            if invite is not None and invite.state == "pending":
                self._open(invite)
                return

    def _waiting(self) -> list[Invite]:
        found = (self.controller.invite(invite_id) for invite_id in self._queue)
        return [invite for invite in found if invite is not None and invite.state == "pending"]

    def _refresh_waiting(self) -> None:
        if self.prompt is not None:
            self.prompt.set_waiting([peer_label(invite) for invite in self._waiting()])

    def _on_controller_invite_updated(self, invite: Invite) -> None:
        if invite.id in self._queue:
            if invite.state != "pending":  # ended while it waited: nothing to ask for
                self._queue.remove(invite.id)
            self._refresh_waiting()

    def _on_tray_message_clicked(self) -> None:
        if self.prompt is not None:
            present_prompt(self.prompt, self._window, None, "")
