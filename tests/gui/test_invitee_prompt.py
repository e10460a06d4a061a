"""The invitee prompt against a scripted connection: it opens for an incoming invite (pushed or
in a snapshot), the PIN boxes, Join and Decline, every ending, the countdown, one prompt at a
time, and the tray message while the main window is hidden."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget
from pytestqt.qtbot import QtBot

from app.controllers.invitee import (
    InviteeController,
    countdown_text,
    group_fingerprint,
    outcome_text,
    pin_digits,
)
from app.stores.cluster import ClusterStore
from app.window.invitee_prompt import (
    InviteePrompt,
    InviteePrompts,
)
from backend.protocol import methods
from backend.protocol.errors import CallTimeout, Conflict, InvalidParams, NotFound
from backend.protocol.types.base import InviteId
from backend.protocol.types.cluster import Invite
from tests.fakes import FakeClock
from tests.gui.helpers import FakeConnection, settle, wait_until

NOW = 1_700_000_000.0
PEER_FINGERPRINT = "sha256:3f2a9c1b77de0a41" + "e" * 48
OWN_FINGERPRINT = "sha256:a1b2c3d4e5f60718" + "0" * 48


def invite(invite_id: str = "inv-1", state: str = "pending", **extra: Any) -> dict[str, Any]:
    return {
        "id": invite_id, "direction": "incoming", "peer_node_id": f"node-{invite_id}",
        "peer_name": "ada", "peer_address": "192.168.1.20", "peer_fingerprint": PEER_FINGERPRINT,
        "created_at": NOW - 10, "expires_at": NOW + 290, "state": state, **extra,
    }  # fmt: skip


def status(*invites: dict[str, Any]) -> dict[str, Any]:
    return {
        "node_id": "me", "fingerprint": OWN_FINGERPRINT, "key_protection": "keyring",
        "invites": list(invites),
    }  # fmt: skip


def pending() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


class RecordingIcon(QSystemTrayIcon):
    """A tray icon that records its messages instead of asking the desktop to show them."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[tuple[str, str]] = []

    def showMessage(self, title: str, message: str, *_rest: Any) -> None:  # type: ignore[override]
        self.messages.append((title, message))


@dataclass
class FakeTray:
    icon: RecordingIcon = field(default_factory=RecordingIcon)


@dataclass
class Ui:
    connection: FakeConnection
    cluster: ClusterStore
    controller: InviteeController
    prompts: InviteePrompts
    window: QWidget
    tray: FakeTray
    clock: FakeClock
    seq: int = 1

    async def ready(self, *invites: dict[str, Any]) -> None:
        """A session whose cluster snapshot holds ``invites``."""
        self.connection.script(
            methods.CLUSTER_SUBSCRIBE, {"seq": self.seq, "status": status(*invites)}
        )
        self.connection.become_ready()
        await wait_until(lambda: self.cluster.loaded, 5, "the cluster snapshot")

    def push(self, **fields: Any) -> None:
        """Push ``invite_changed`` for an invite with ``fields``."""
        self.seq += 1
        self.connection.push(
            methods.CLUSTER_EVENT,
            {"seq": self.seq, "event": "invite_changed", "invite": invite(**fields)},
        )

    @property
    def prompt(self) -> InviteePrompt:
        assert self.prompts.prompt is not None, "no prompt is open"
        return self.prompts.prompt

    def note(self) -> str:
        return self.prompt.note.text() if self.prompt.note.isVisible() else ""


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    connection = FakeConnection()
    cluster = ClusterStore(connection)
    controller = InviteeController(connection, cluster)
    window = QWidget()
    qtbot.addWidget(window)
    window.show()
    tray = FakeTray()
    clock = FakeClock(NOW)
    prompts = InviteePrompts(controller, window, tray, clock)
    yield Ui(connection, cluster, controller, prompts, window, tray, clock)
    prompts.close_all()
    await controller.close()
    await cluster.close()
    await connection.stop()


async def opened(ui: Ui) -> InviteePrompt:
    """The session is ready and the prompt for ``inv-1`` open."""
    await ui.ready()
    ui.push()
    return ui.prompt


def type_pin(qtbot: QtBot, prompt: InviteePrompt, digits: str) -> None:
    for digit in digits:
        focused = prompt.focusWidget()
        assert focused is not None
        qtbot.keyClick(focused, digit)


# Pure wording ----------------------------------------------------------------------------------


def test_words_for_the_pin_the_fingerprint_and_the_countdown() -> None:
    assert pin_digits("123 456") == pin_digits("123-456") == pin_digits("１２３456") == "123456"
    assert pin_digits("abc") == ""
    assert group_fingerprint(PEER_FINGERPRINT) == "3f2a 9c1b 77de 0a41"
    assert group_fingerprint("") == "unknown"
    assert [countdown_text(s) for s in (300, 299.2, 61, 59.5, 0.4, 0, -3)] == [
        "5:00", "5:00", "1:01", "1:00", "0:01", "0:00", "0:00",
    ]  # fmt: skip


def test_every_ending_reads_as_a_sentence() -> None:
    def ended(state: str, reason: str | None = None) -> str:
        return outcome_text(msgspec.convert(invite(state=state, reason=reason), Invite))

    assert ended("pending") == ""
    assert ended("paired") == "You joined ada's cluster."
    assert ended("wrong-pin") == "That PIN was wrong. Ask for a new invite on ada."
    assert ended("expired") == "The invite ran out of time. Ask for a new invite on ada."
    assert ended("canceled") == "ada canceled the invite."
    assert ended("declined") == "You declined the invite from ada."
    assert ended("failed", "ada stopped answering: timed out.") == (
        "Could not join ada's cluster: ada stopped answering: timed out."
    )
    assert ended("busy", None) == "Could not join ada's cluster: pairing failed."


# Opening ---------------------------------------------------------------------------------------


async def test_the_prompt_opens_on_a_pushed_incoming_invite(ui: Ui) -> None:
    await ui.ready()
    ui.push(invite_id="out-1", direction="outgoing")
    assert ui.prompts.prompt is None  # this computer invited: its PIN panel shows that one
    ui.push()
    prompt = ui.prompt
    assert prompt.isVisible()
    assert prompt.invite_id == "inv-1"
    assert prompt.heading.text() == "Invite from ada"
    assert "ada invites this computer to its cluster" in prompt.intro.text()
    assert prompt.peer_fingerprint.text() == "3f2a 9c1b 77de 0a41"
    assert "a1b2&nbsp;c3d4&nbsp;e5f6&nbsp;0718" in prompt.hint.text()
    assert prompt.countdown.text() == "Expires in 4:50"
    assert prompt.focusWidget() is prompt.pin.boxes[0]
    assert not prompt.join_button.isEnabled() and prompt.decline_button.isEnabled()
    assert ui.tray.icon.messages == []  # the window is in sight


async def test_the_prompt_opens_for_a_pending_invite_in_the_snapshot(ui: Ui) -> None:
    await ui.ready(invite(invite_id="old", state="expired"), invite())
    await settle()
    assert ui.prompt.invite_id == "inv-1"
    assert ui.prompts.queued == []


async def test_the_same_invite_pushed_again_opens_no_second_prompt(ui: Ui) -> None:
    prompt = await opened(ui)
    ui.push()
    resets: list[None] = []
    ui.cluster.reset.connect(lambda: resets.append(None))
    ui.connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 9, "status": status(invite())})
    ui.cluster.resubscribe()
    await wait_until(lambda: bool(resets), 5, "the new snapshot")
    assert ui.prompt is prompt
    assert ui.prompts.queued == []


# The PIN boxes ---------------------------------------------------------------------------------


async def test_typing_moves_on_and_backspace_in_an_empty_box_goes_back(
    qtbot: QtBot, ui: Ui
) -> None:
    prompt = await opened(ui)
    boxes = prompt.pin.boxes
    type_pin(qtbot, prompt, "48")
    assert [box.text() for box in boxes[:3]] == ["4", "8", ""]
    assert prompt.focusWidget() is boxes[2]
    qtbot.keyClick(boxes[2], Qt.Key.Key_Backspace)  # empty: back to the 8, which goes
    assert prompt.focusWidget() is boxes[1]
    assert boxes[1].text() == "" and prompt.pin.pin == "4"
    qtbot.keyClick(boxes[1], Qt.Key.Key_Left)
    assert prompt.focusWidget() is boxes[0]
    qtbot.keyClick(boxes[0], "7")  # replaces the 4
    assert prompt.pin.pin == "7" and prompt.focusWidget() is boxes[1]


async def test_non_digits_are_ignored(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    boxes = prompt.pin.boxes
    type_pin(qtbot, prompt, "1")
    for key in ("a", " ", "-", "+"):
        qtbot.keyClick(boxes[1], key)
    assert boxes[1].text() == "" and prompt.focusWidget() is boxes[1]
    boxes[0].setFocus()
    boxes[0].selectAll()
    boxes[0].insert("x")  # as a drop or an input method would
    assert boxes[0].text() == "1"
    QGuiApplication.clipboard().setText("no digits")
    qtbot.keyClick(boxes[0], Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert prompt.pin.pin == "1"


@pytest.mark.parametrize("text", ["123456", "123 456", "123-456"])
async def test_pasting_in_any_box_fills_all_six(qtbot: QtBot, ui: Ui, text: str) -> None:
    prompt = await opened(ui)
    for index, box in enumerate(prompt.pin.boxes):
        prompt.pin.clear()
        type_pin(qtbot, prompt, "9" * index)  # the boxes before it hold something
        assert prompt.focusWidget() is box
        QGuiApplication.clipboard().setText(text)
        qtbot.keyClick(box, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
        assert [b.text() for b in prompt.pin.boxes] == list("123456"), f"pasted in box {index}"
        assert prompt.join_button.isEnabled()
    prompt.pin.clear()
    prompt.pin.boxes[3].paste()  # the context menu's Paste
    assert prompt.pin.pin == "123456"


async def test_paste_with_the_focus_on_a_button_fills_the_boxes(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    prompt.activateWindow()
    await wait_until(lambda: QApplication.activeWindow() is prompt, 5, "the prompt to be active")
    prompt.decline_button.setFocus()
    QGuiApplication.clipboard().setText("PIN: 483 920")
    qtbot.keyClick(prompt.decline_button, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert prompt.pin.pin == "483920"


# Join and decline ------------------------------------------------------------------------------


async def test_join_sends_the_pin_and_shows_the_pairing(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    type_pin(qtbot, prompt, "48392")
    assert not prompt.join_button.isEnabled()  # five digits
    type_pin(qtbot, prompt, "0")
    assert prompt.join_button.isEnabled()
    answer = pending()
    ui.connection.script(methods.CLUSTER_ACCEPT, answer)
    qtbot.mouseClick(prompt.join_button, Qt.MouseButton.LeftButton)
    await settle()
    assert ui.connection.called(methods.CLUSTER_ACCEPT) == [{"id": "inv-1", "pin": "483920"}]
    assert ui.note() == "Joining…"
    assert not prompt.pin.isEnabled()
    assert not prompt.join_button.isEnabled() and not prompt.decline_button.isEnabled()
    answer.set_result(invite(state="paired", reason="paired"))
    await wait_until(lambda: prompt.ended, 5, "the answer")
    assert ui.note() == "You joined ada's cluster."
    assert prompt.close_button.isVisible() and not prompt.join_button.isVisible()
    assert not prompt.pin.isVisible() and not prompt.countdown.isVisible()
    ui.push(state="paired")  # the push after the answer changes nothing
    assert ui.note() == "You joined ada's cluster."
    qtbot.mouseClick(prompt.close_button, Qt.MouseButton.LeftButton)
    assert ui.prompts.prompt is None


async def test_a_wrong_pin_says_to_ask_for_a_new_invite(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    ui.connection.script(methods.CLUSTER_ACCEPT, invite(state="wrong-pin"))
    prompt.pin.paste("111111")
    qtbot.keyClick(prompt.pin.boxes[5], Qt.Key.Key_Return)  # Join is the default button
    await wait_until(lambda: prompt.ended, 5, "the answer")
    assert ui.note() == "That PIN was wrong. Ask for a new invite on ada."
    assert ui.connection.called(methods.CLUSTER_ACCEPT) == [{"id": "inv-1", "pin": "111111"}]


async def test_the_outcome_pushed_before_the_answer_shows_at_once(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    answer = pending()
    ui.connection.script(methods.CLUSTER_ACCEPT, answer)
    prompt.pin.paste("123456")
    prompt.join_button.click()
    await settle()
    ui.push(state="paired")
    assert ui.note() == "You joined ada's cluster."
    answer.set_result(invite(state="paired"))
    await wait_until(lambda: not ui.controller.answering(InviteId("inv-1")), 5, "the answer")
    assert ui.note() == "You joined ada's cluster."


async def test_decline_sends_decline_and_says_so(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    answer = pending()
    ui.connection.script(methods.CLUSTER_DECLINE, answer)
    qtbot.mouseClick(prompt.decline_button, Qt.MouseButton.LeftButton)
    await settle()
    assert ui.connection.called(methods.CLUSTER_DECLINE) == [{"id": "inv-1"}]
    assert ui.note() == "Declining…"
    assert not prompt.decline_button.isEnabled()
    answer.set_result(invite(state="declined"))
    await wait_until(lambda: prompt.ended, 5, "the answer")
    assert ui.note() == "You declined the invite from ada."
    assert ui.connection.called(methods.CLUSTER_ACCEPT) == []


async def test_a_refused_pin_or_a_lost_answer_leaves_the_invite_open(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    prompt.pin.paste("123456")
    ui.connection.script(methods.CLUSTER_ACCEPT, InvalidParams("the PIN is six digits"))
    prompt.join_button.click()
    await wait_until(lambda: prompt.join_button.isEnabled(), 5, "the error")
    assert ui.note() == "The PIN is six digits (0-9), as shown on ada."
    assert not prompt.ended and prompt.pin.isEnabled()
    ui.connection.script(methods.CLUSTER_ACCEPT, CallTimeout("cluster:accept timed out"))
    prompt.join_button.click()
    await wait_until(lambda: prompt.join_button.isEnabled(), 5, "the error")
    assert ui.note().startswith("ada took too long to answer.")
    qtbot.keyClick(prompt.pin.boxes[5], "7")
    assert ui.note() == ""  # editing the PIN clears the error


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (NotFound("no invite inv-1"), "this computer no longer holds that invite."),
        (Conflict("that invite is over: the invite was canceled"), "the invite was canceled."),
    ],
)
async def test_an_invite_the_broker_no_longer_holds_ends_the_prompt(
    ui: Ui, error: Exception, words: str
) -> None:
    prompt = await opened(ui)
    prompt.pin.paste("123456")
    ui.connection.script(methods.CLUSTER_ACCEPT, error)
    prompt.join_button.click()
    await wait_until(lambda: prompt.ended, 5, "the error")
    assert ui.note().startswith("Could not join ada's cluster: ")
    assert ui.note().endswith(words)


# Endings from elsewhere ------------------------------------------------------------------------


async def test_the_countdown_reaching_zero_expires_the_prompt(ui: Ui) -> None:
    prompt = await opened(ui)
    ui.clock.now = NOW + 289.5
    prompt.tick()
    assert prompt.countdown.text() == "Expires in 0:01" and not prompt.ended
    ui.clock.now = NOW + 290
    prompt.tick()
    assert prompt.ended
    assert ui.note() == "The invite ran out of time. Ask for a new invite on ada."
    assert not prompt.join_button.isVisible()
    ui.push(state="expired")  # the broker agrees a moment later
    assert ui.note() == "The invite ran out of time. Ask for a new invite on ada."


async def test_the_broker_expiring_the_invite_ends_the_prompt(qtbot: QtBot, ui: Ui) -> None:
    prompt = await opened(ui)
    type_pin(qtbot, prompt, "12")
    ui.push(state="expired", reason="the invite expired after 5 minutes; send a new one")
    assert prompt.ended
    assert ui.note() == "The invite ran out of time. Ask for a new invite on ada."


async def test_the_inviter_canceling_while_the_prompt_is_open_says_so(ui: Ui) -> None:
    prompt = await opened(ui)
    ui.push(state="canceled", reason="the invite was canceled")
    assert ui.note() == "ada canceled the invite."
    assert prompt.close_button.isVisible()
    ui.push(state="pending")  # nothing reopens an invite that ended
    assert ui.note() == "ada canceled the invite."


async def test_a_snapshot_without_the_invite_says_the_service_restarted(ui: Ui) -> None:
    prompt = await opened(ui)
    ui.connection.lose_session()
    await ui.ready()
    assert prompt.ended
    assert ui.note().startswith("The PAIR service restarted, which ends every open invite.")


# One prompt at a time, the window and the tray -------------------------------------------------


async def test_a_second_invite_waits_for_an_open_prompt_that_wants_a_pin(ui: Ui) -> None:
    first = await opened(ui)
    ui.push(invite_id="inv-2", peer_name="grace")
    assert ui.prompt is first
    assert ui.prompts.queued == ["inv-2"]
    assert first.waiting.text().startswith("Also waiting: an invite from grace.")
    first.close()
    second = ui.prompt
    assert second.invite_id == "inv-2" and second.isVisible()
    # An ended prompt gives way to a new invite at once.
    ui.push(invite_id="inv-2", peer_name="grace", state="canceled")
    ui.push(invite_id="inv-3", peer_name="alan")
    assert ui.prompt.invite_id == "inv-3"
    assert not second.isVisible()


async def test_a_queued_invite_that_ended_meanwhile_is_skipped(ui: Ui) -> None:
    first = await opened(ui)
    ui.push(invite_id="inv-2", peer_name="grace")
    ui.push(invite_id="inv-2", peer_name="grace", state="canceled")
    assert first.waiting.isHidden()
    first.close()
    assert ui.prompts.prompt is None


async def test_ended_invites_are_dropped_and_never_prompted_again(ui: Ui) -> None:
    first = await opened(ui)
    for n in range(2, 40):  # a stream of invites that each end: nothing piles up
        ui.push(invite_id=f"inv-{n}", peer_name=f"vm-{n}")
        ui.push(invite_id=f"inv-{n}", peer_name=f"vm-{n}", state="expired")
    assert ui.controller._prompted.keys() == {"inv-1"}
    assert ui.controller.invite(InviteId("inv-2")) is None
    ui.push(invite_id="inv-2", peer_name="vm-2")  # a stale pending copy asks for nothing
    assert ui.prompts.queued == [] and ui.prompt is first


async def test_the_tray_says_so_only_while_the_window_is_hidden(ui: Ui) -> None:
    await ui.ready()
    ui.push()
    assert ui.tray.icon.messages == []
    ui.prompts.close_all()
    ui.window.hide()
    ui.push(invite_id="inv-2")
    assert ui.tray.icon.messages == [("PAIR", "ada invites this computer to its cluster")]
    prompt = ui.prompt
    assert prompt.isVisible() and prompt.parent() is None  # not hidden with the window
    prompt.hide()
    ui.tray.icon.messageClicked.emit()
    assert prompt.isVisible()
    ui.window.showMinimized()
    ui.push(invite_id="inv-3")  # queued behind inv-2, still announced
    assert len(ui.tray.icon.messages) == 2


async def test_deleting_the_window_just_after_its_prompt_closed_is_safe(ui: Ui) -> None:
    await ui.ready()
    window = QWidget()
    window.show()
    prompts = InviteePrompts(ui.controller, window, None, ui.clock)
    ui.push()
    assert prompts.prompt is not None and prompts.prompt.parent() is window
    prompts.close_all()
    del window, prompts  # the window, the prompt's parent, goes before its deleteLater runs
    gc.collect()
    await settle()
