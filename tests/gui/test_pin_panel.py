"""The PIN panel: six digits to read aloud, a countdown to the invite's expiry, Cancel, and how
the invite ended in words for every state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.window.add_node_dialog import AddNodeDialog
from app.window.pin_panel import (
    format_countdown,
    format_pin,
    short_fingerprint,
)
from backend.protocol import methods
from backend.protocol.errors import Conflict
from tests.gui.add_node_rig import (
    LAPTOP,
    LAPTOP_FINGERPRINT,
    NOW,
    Rig,
    build_rig,
    created,
    invite,
    node,
    status,
)
from tests.gui.font_checks import digits_line_up
from tests.gui.helpers import settle, wait_until


@pytest.fixture
async def rig(qapp: QApplication) -> AsyncIterator[Rig]:
    quit_on_close = qapp.quitOnLastWindowClosed()
    qapp.setQuitOnLastWindowClosed(False)
    built = build_rig()
    await built.start([node(LAPTOP, "laptop", "192.168.1.30")], status())
    yield built
    await built.close()
    qapp.setQuitOnLastWindowClosed(quit_on_close)


@pytest.fixture
async def dialog(rig: Rig, qtbot: QtBot) -> AsyncIterator[AddNodeDialog]:
    shown = AddNodeDialog(rig.controller, clock=rig.clock)
    qtbot.addWidget(shown)
    shown.show()
    yield shown
    shown.close()  # while the loop runs: closing cancels an open invite


async def open_invite(rig: Rig, dialog: AddNodeDialog, answer: Any = None) -> None:
    """Click Invite on the laptop's row; the broker answers ``answer`` (a pending invite)."""
    rig.connection.script(methods.CLUSTER_INVITE, answer if answer is not None else created())
    dialog.rows[LAPTOP].invite_button.click()
    await wait_until(lambda: dialog.panel.invite is not None, 5, "the invite's answer")


def test_pin_countdown_and_fingerprint_read_easily() -> None:
    assert format_pin("482913") == "482 913"
    assert format_pin("") == ""
    assert format_countdown(300) == "5:00"
    assert format_countdown(299.9) == "4:59"
    assert format_countdown(61) == "1:01"
    assert format_countdown(0.5) == "0:00"
    assert format_countdown(-3) == "0:00"
    assert short_fingerprint(LAPTOP_FINGERPRINT) == "3f2a 9c01 77de 0b45"
    assert short_fingerprint("") == ""


async def test_the_panel_shows_the_pin_large_who_and_how_long(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await open_invite(rig, dialog)
    panel = dialog.panel
    assert dialog.stack.currentWidget() is panel
    assert not dialog.buttons.isVisible()  # the panel has its own buttons
    assert panel.heading.text() == "Type this PIN on laptop"
    assert panel.pin_label.text() == "482 913"
    assert digits_line_up(panel.pin_label.font())
    assert panel.pin_label.font().pointSize() >= 2 * panel.heading.font().pointSize()
    assert panel.countdown_label.text() == "Expires in 5:00"
    assert panel.peer_label.text() == "laptop · 192.168.1.30 · fingerprint 3f2a 9c01 77de 0b45"
    assert panel.detail_label.text() == "Waiting for someone to type it on laptop…"
    assert panel.cancel_button.text() == "Cancel"
    assert panel.cancel_button.isEnabled()
    assert not panel.again_button.isVisible()
    assert panel.timer.isActive()
    assert panel.timer.interval() == 1000


async def test_the_countdown_runs_every_second_down_to_zero_then_the_invite_expires(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await open_invite(rig, dialog)
    panel = dialog.panel
    rig.clock.now = NOW + 1
    # The panel's own one-second timer picks the new time up.
    await wait_until(lambda: panel.countdown_label.text() == "Expires in 4:59", 3, "4:59")
    rig.clock.now = NOW + 62.5
    panel.tick()
    assert panel.countdown_label.text() == "Expires in 3:57"
    rig.clock.now = NOW + 299.5
    panel.tick()
    assert panel.countdown_label.text() == "Expires in 0:00"
    assert panel.pin_label.isVisible()
    assert not panel.ended
    rig.clock.now = NOW + 300
    panel.tick()
    # Time is up here, before the broker's expiry arrives.
    assert panel.ended
    assert panel.heading.text() == "The PIN expired"
    assert "Start a new invite" in panel.detail_label.text()
    assert not panel.pin_label.isVisible()
    assert not panel.countdown_label.isVisible()
    assert not panel.timer.isActive()
    assert panel.cancel_button.text() == "Close"
    assert panel.again_button.isVisible()
    rig.push_invite(invite("expired", reason="the invite expired after 5 minutes"))
    await settle()
    assert panel.heading.text() == "The PIN expired"
    panel.cancel_button.click()
    assert not dialog.isVisible()
    assert rig.connection.called(methods.CLUSTER_CANCEL) == []  # it was over: nothing to cancel


async def test_a_pairing_that_finished_just_before_the_time_was_up_shows_as_paired(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await open_invite(rig, dialog)
    rig.clock.now = NOW + 301
    dialog.panel.tick()
    assert dialog.panel.heading.text() == "The PIN expired"
    rig.push_invite(invite("paired"))  # the broker's word wins over this clock
    await wait_until(lambda: dialog.panel.heading.text() == "Paired with laptop", 5)


ENDINGS = [
    ("paired", None, "Paired with laptop", "laptop is now a member of this cluster.", False),
    ("wrong-pin", "the PIN was wrong; send a new invite to try again",
     "The PIN typed on laptop was wrong.", "Start a new invite: a PIN works for one try", True),
    ("declined", "the other computer declined the invite", "laptop declined the invite",
     "chose not to join", True),
    ("canceled", "the invite was canceled", "Invite canceled", "laptop was told", True),
    ("expired", "the invite expired after 5 minutes; send a new one", "The PIN expired",
     "within 5 minutes", True),
    ("rejected", "that computer is already in another cluster; it must leave it first",
     "laptop is already in another cluster", "leave that cluster", False),
    ("busy", "that computer is pairing with another one; try again in a few minutes",
     "Another pairing is under way",
     "That computer is pairing with another one; try again in a few minutes.", True),
    ("locked-out", "pairing is paused for 15 minutes after repeated wrong PINs",
     "Too many wrong PINs: inviting is paused for 15\u00a0minutes", "Try again later", False),
    ("failed", "laptop stopped answering: connection reset", "Pairing with laptop failed",
     "laptop stopped answering: connection reset.", True),
    ("not-accepting", "that computer is not accepting invites", "laptop is not accepting invites",
     "choose Join a cluster…", True),
]  # fmt: skip


@pytest.mark.parametrize(("state", "reason", "headline", "detail", "retry"), ENDINGS)
async def test_every_ending_is_said_in_words(
    rig: Rig,
    dialog: AddNodeDialog,
    state: str,
    reason: str | None,
    headline: str,
    detail: str,
    retry: bool,
) -> None:
    await open_invite(rig, dialog)
    panel = dialog.panel
    rig.push_invite(invite(state, **({"reason": reason} if reason else {})))
    await wait_until(lambda: panel.ended, 5, f"the {state} push")
    assert panel.heading.text() == headline
    assert detail in panel.detail_label.text()
    assert panel.cancel_button.text() == "Close"
    assert panel.cancel_button.isEnabled()
    assert panel.again_button.isVisible() is retry
    assert not panel.pin_label.isVisible()
    assert not panel.timer.isActive()
    # The peer stays named, so it is clear which computer this was about.
    assert panel.peer_label.text().startswith("laptop · 192.168.1.30")


async def test_an_invite_that_ended_at_once_shows_why_and_can_be_tried_again(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    own_open = "this computer already has an open invite; finish or cancel it first"
    await open_invite(rig, dialog, created("busy", pin="", reason=own_open))
    panel = dialog.panel
    assert panel.ended
    assert panel.heading.text() == "Another pairing is under way"
    assert panel.detail_label.text() == (
        "This computer already has an open invite; finish or cancel it first."
    )
    assert not panel.pin_label.isVisible()
    rig.connection.script(methods.CLUSTER_INVITE, created(id="inv-2", pin="105730"))
    panel.again_button.click()
    assert panel.heading.text() == "Inviting laptop…"
    assert panel.heading.styleSheet() == ""  # not in the last outcome's colour
    await wait_until(lambda: panel.pin_label.text() == "105 730", 5, "the new PIN")
    assert len(rig.connection.called(methods.CLUSTER_INVITE)) == 2
    assert panel.cancel_button.text() == "Cancel"


async def test_cancel_sends_cluster_cancel_with_the_invite_id(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await open_invite(rig, dialog)
    panel = dialog.panel
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    rig.connection.script(methods.CLUSTER_CANCEL, answer)
    panel.cancel_button.click()
    await wait_until(lambda: bool(rig.connection.called(methods.CLUSTER_CANCEL)), 5, "cancel")
    assert rig.connection.called(methods.CLUSTER_CANCEL) == [{"id": "inv-1"}]
    assert panel.detail_label.text() == "Canceling the invite…"
    assert not panel.cancel_button.isEnabled()  # one cancel at a time
    answer.set_result(invite("canceled", reason="the invite was canceled"))
    await wait_until(lambda: panel.ended, 5, "the cancel's answer")
    assert panel.heading.text() == "Invite canceled"
    assert panel.cancel_button.text() == "Close"


async def test_a_cancel_that_fails_says_so_and_the_truth_follows(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await open_invite(rig, dialog)
    panel = dialog.panel
    rig.connection.script(methods.CLUSTER_CANCEL, Conflict("that invite is over: paired"))
    panel.cancel_button.click()
    await wait_until(lambda: "Could not cancel" in panel.detail_label.text(), 5, "the error")
    assert panel.detail_label.text() == "Could not cancel the invite: that invite is over: paired"
    assert panel.cancel_button.isEnabled()
    rig.push_invite(invite("paired"))
    await wait_until(lambda: panel.heading.text() == "Paired with laptop", 5)


async def test_cancel_before_the_invite_has_an_id_cancels_it_once_it_has(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    rig.connection.script(methods.CLUSTER_INVITE, answer)
    rig.connection.script(methods.CLUSTER_CANCEL, invite("canceled"))
    dialog.rows[LAPTOP].invite_button.click()
    panel = dialog.panel
    assert panel.heading.text() == "Inviting laptop…"
    panel.cancel_button.click()
    assert not panel.cancel_button.isEnabled()
    await settle()
    assert rig.connection.called(methods.CLUSTER_CANCEL) == []
    answer.set_result(created())
    await wait_until(lambda: panel.ended, 5, "the canceled invite")
    assert rig.connection.called(methods.CLUSTER_CANCEL) == [{"id": "inv-1"}]
    assert panel.heading.text() == "Invite canceled"


async def test_a_broker_restart_ends_the_invite_in_words(rig: Rig, dialog: AddNodeDialog) -> None:
    await open_invite(rig, dialog)
    rig.connection.lose_session()
    rig.seq = 1
    await rig.start([node(LAPTOP, "laptop", "192.168.1.30")], status())  # the invite is gone
    panel = dialog.panel
    await wait_until(lambda: panel.ended, 5, "the invite to end")
    assert panel.heading.text() == "Pairing with laptop failed"
    assert "restarted" in panel.detail_label.text()
