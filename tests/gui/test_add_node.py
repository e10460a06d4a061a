"""The Add node dialog: it lists only PAIR computers that could join, checks a typed address as
it is typed and with a probe, and says in words why an invite did not open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from app.address import Address
from app.controllers.add_node import candidates
from app.window.add_node_dialog import AddNodeDialog
from app.window.look import State
from app.window.widgets import tinted_state
from backend.protocol import methods
from backend.protocol.errors import Conflict, InvalidParams, Unavailable
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import DiscoveredNode
from tests.gui.add_node_rig import (
    DESKTOP,
    LAPTOP,
    OWN_CLUSTER,
    SELF_ID,
    STUDIO,
    Rig,
    build_rig,
    created,
    member,
    node,
    node_info,
    self_node,
    status,
)
from tests.gui.helpers import wait_until

MEMBER_ID = NodeId("00000000-0000-4000-8000-0000000000ee")
GPU = 24 * 10**9


@pytest.fixture
async def rig(qapp: QApplication) -> AsyncIterator[Rig]:
    # As in the app: closing the last window (here the dialog) must not stop the event loop.
    quit_on_close = qapp.quitOnLastWindowClosed()
    qapp.setQuitOnLastWindowClosed(False)
    built = build_rig()
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


def lan() -> list[dict[str, object]]:
    """Who discovery knows besides this node: two invitable computers, one in another
    cluster, a member, an engine-only address and a node of this cluster not yet a member."""
    return [
        node(LAPTOP, "laptop", "192.168.1.30", telemetry={"valid": True, "vram_total_bytes": GPU}),
        node(DESKTOP, "Desktop", "192.168.1.31"),
        node(STUDIO, "studio", "192.168.1.32", cluster_id="c-other"),
        node(MEMBER_ID, "old-box", "192.168.1.40", cluster_id=OWN_CLUSTER),
        node("manual-1", "ollama at nas", "192.168.1.50", kind="engine", sources=["manual"]),
        node("00000000-0000-4000-8000-0000000000ff", "newcomer", cluster_id=OWN_CLUSTER),
    ]  # fmt: skip


def with_member() -> object:
    return status(members=[member(MEMBER_ID, "old-box")])


def shown(label: QLabel) -> str:
    return label.text() if label.isVisible() else ""


def test_candidates_are_pair_nodes_that_are_neither_this_node_nor_members() -> None:
    nodes = [msgspec.convert(raw, DiscoveredNode) for raw in [self_node(), *lan()]]
    found = candidates(nodes, self_id=SELF_ID, members={MEMBER_ID}, cluster_id=OWN_CLUSTER)
    assert [c.name for c in found] == ["Desktop", "laptop", "studio"]
    by_name = {c.name: c for c in found}
    assert by_name["laptop"].address == Address("192.168.1.30", 14320)
    assert by_name["laptop"].gpu == "24\u00a0GB GPU"
    assert by_name["laptop"].invitable
    assert by_name["studio"].in_other_cluster
    assert not by_name["studio"].invitable
    # This node in no cluster yet: a node in any cluster is in another one.
    alone = candidates(nodes, self_id=SELF_ID, members=set(), cluster_id=None)
    assert {c.name for c in alone if c.in_other_cluster} == {"studio", "old-box", "newcomer"}


async def test_the_dialog_lists_only_computers_that_could_join(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await rig.start(lan(), with_member())
    assert set(dialog.rows) == {LAPTOP, DESKTOP, STUDIO}
    laptop = dialog.rows[LAPTOP]
    assert laptop.details_label.text() == "192.168.1.30 · PAIR 0.1.0 · 24\u00a0GB GPU"
    assert laptop.invite_button.isVisible()
    studio = dialog.rows[STUDIO]
    assert not studio.invite_button.isVisible()
    assert shown(studio.note_label) == "In another cluster"
    assert not dialog.none_found.isVisible()
    # The laptop pairs (through another member, say): it leaves the list.
    rig.push_membership(status(members=[member(MEMBER_ID, "old-box"), member(LAPTOP, "laptop")]))
    await wait_until(lambda: LAPTOP not in dialog.rows, 5, "the laptop to leave the list")
    # A computer found later appears.
    rig.push_node(node("00000000-0000-4000-8000-0000000000dd", "nuc", "192.168.1.60"), 2)
    await wait_until(lambda: len(dialog.rows) == 3, 5, "the new computer")
    assert [row.candidate.name for row in dialog.rows.values()] == ["Desktop", "nuc", "studio"]


async def test_an_empty_network_says_how_to_add_a_computer(rig: Rig, dialog: AddNodeDialog) -> None:
    await rig.start([], status())
    assert dialog.rows == {}
    assert "add it by address below" in shown(dialog.none_found)


async def test_the_address_is_checked_as_it_is_typed(rig: Rig, dialog: AddNodeDialog) -> None:
    await rig.start()
    field = dialog.address_field
    message = dialog.address_message
    assert "IP address or a host name" in shown(message)
    assert not dialog.check_button.isEnabled()
    field.setText("192.168.")  # still typing: advice, not an error
    assert not dialog.check_button.isEnabled()
    assert shown(message) == "An IPv4 address has four numbers…"
    assert message.foregroundRole() == QPalette.ColorRole.PlaceholderText
    assert message.styleSheet() == ""
    field.setText("gpu-box:0")
    assert shown(message) == "Port must be 1-65535."
    assert tinted_state(message) is State.ERROR
    assert not dialog.check_button.isEnabled()
    field.setText("fd7a:115c::5:14320")
    assert shown(message) == "IPv6 with a port needs brackets: [addr]:port."
    field.setText("[fd7a:115c::5]:14321")
    assert dialog.check_button.isEnabled()
    assert shown(message) == "Check asks who answers at [fd7a:115c::5]:14321."
    assert not dialog.address_invite_button.isEnabled()  # not before a probe said yes


async def test_check_says_who_answers_then_invite_is_offered(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await rig.start()
    rig.connection.script(
        methods.CLUSTER_PROBE, {"info": node_info(LAPTOP, "laptop", "Darwin"), "invitable": True}
    )
    dialog.address_field.setText("laptop.tail1234.ts.net:14321")
    dialog.check_button.click()
    assert shown(dialog.address_message) == "Checking laptop.tail1234.ts.net:14321…"
    await wait_until(lambda: dialog.address_invite_button.isEnabled(), 5, "Invite")
    assert rig.connection.called(methods.CLUSTER_PROBE) == [
        {"address": "laptop.tail1234.ts.net", "port": 14321}
    ]
    assert shown(dialog.address_message) == (
        "laptop (PAIR 0.1.0, macOS) answers at laptop.tail1234.ts.net:14321."
    )
    # Another address is another question: Invite waits for its own check.
    dialog.address_field.setText("laptop.tail1234.ts.net")
    assert not dialog.address_invite_button.isEnabled()
    dialog.address_field.setText("laptop.tail1234.ts.net:14321")
    assert not dialog.address_invite_button.isEnabled()
    # Checked again, Invite opens the PIN panel.
    rig.connection.script(
        methods.CLUSTER_PROBE, {"info": node_info(LAPTOP, "laptop", "Darwin"), "invitable": True}
    )
    dialog.check_button.click()
    await wait_until(lambda: dialog.address_invite_button.isEnabled(), 5, "Invite")
    rig.connection.script(methods.CLUSTER_INVITE, created())
    dialog.address_invite_button.click()
    await wait_until(lambda: dialog.panel.pin_label.isVisible(), 5, "the PIN")
    assert rig.connection.called(methods.CLUSTER_INVITE) == [
        {"address": "laptop.tail1234.ts.net", "port": 14321}
    ]
    assert dialog.stack.currentWidget() is dialog.panel


async def test_check_where_nothing_answers(rig: Rig, dialog: AddNodeDialog) -> None:
    await rig.start()
    rig.connection.script(methods.CLUSTER_PROBE, Unavailable("no PAIR node answers at x"))
    dialog.address_field.setText("192.168.1.99")
    dialog.check_button.click()
    await wait_until(lambda: "No PAIR computer answers" in dialog.address_message.text(), 5)
    assert dialog.address_message.text().startswith(
        "No PAIR computer answers at 192.168.1.99:14320. Check the address, and that PAIR is "
        "running on that computer"
    )
    assert not dialog.address_invite_button.isEnabled()


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (
            {"info": node_info(SELF_ID, "this-pc"), "invitable": False,
             "reason": "127.0.0.1:14320 is this computer"},
            "this-pc (PAIR 0.1.0, Linux) answers at 127.0.0.1:14320, but 127.0.0.1:14320 is "
            "this computer.",
        ),
        (
            {"info": node_info(LAPTOP, "laptop", "Windows", cluster_id="c-other"),
             "invitable": True},
            "laptop (PAIR 0.1.0, Windows) answers at 127.0.0.1:14320, but it is in another "
            "cluster: it has to leave that one first.",
        ),
    ],
)  # fmt: skip
async def test_check_of_a_computer_that_cannot_be_invited_says_why(
    rig: Rig, dialog: AddNodeDialog, probe: dict[str, object], expected: str
) -> None:
    await rig.start()
    rig.connection.script(methods.CLUSTER_PROBE, probe)
    dialog.address_field.setText("127.0.0.1")
    dialog.check_button.click()
    await wait_until(lambda: "answers at" in dialog.address_message.text(), 5)
    assert dialog.address_message.text() == expected
    assert not dialog.address_invite_button.isEnabled()


async def test_a_late_probe_answer_for_another_address_is_ignored(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await rig.start()
    rig.connection.script(
        methods.CLUSTER_PROBE, {"info": node_info(LAPTOP, "laptop"), "invitable": True}
    )
    answers: list[object] = []
    rig.controller.probed.connect(answers.append)
    dialog.address_field.setText("192.168.1.30")
    dialog.check_button.click()
    dialog.address_field.setText("192.168.1.31")
    await wait_until(lambda: bool(answers), 5, "the probe's answer")
    assert dialog.address_message.text() == "Check asks who answers at 192.168.1.31:14320."
    assert not dialog.address_invite_button.isEnabled()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (Unavailable("no PAIR node answers"), "No PAIR computer answers at 192.168.1.30:14320."),
        (InvalidParams("192.168.1.30:14320 is this computer"),
         "192.168.1.30:14320 is this computer: invite another one."),
        (Conflict("laptop is already a member of this cluster"),
         "laptop is already a member of this cluster."),
    ],
)  # fmt: skip
async def test_invite_errors_are_said_in_words(
    rig: Rig, dialog: AddNodeDialog, error: Exception, expected: str
) -> None:
    await rig.start(lan(), with_member())
    rig.connection.script(methods.CLUSTER_INVITE, error)
    dialog.rows[LAPTOP].invite_button.click()
    assert dialog.stack.currentWidget() is dialog.panel
    assert dialog.panel.heading.text() == "Inviting laptop…"
    await wait_until(lambda: dialog.stack.currentIndex() == 0, 5, "back to the list")
    assert shown(dialog.list_message).startswith(expected)
    assert rig.connection.called(methods.CLUSTER_INVITE) == [
        {"address": "192.168.1.30", "port": 14320}
    ]
    assert dialog.buttons.isVisible()


async def test_an_invite_error_for_a_typed_address_shows_under_the_field(
    rig: Rig, dialog: AddNodeDialog
) -> None:
    await rig.start()
    rig.connection.script(
        methods.CLUSTER_PROBE, {"info": node_info(LAPTOP, "laptop"), "invitable": True}
    )
    rig.connection.script(methods.CLUSTER_INVITE, Unavailable("gone"))
    dialog.address_field.setText("192.168.1.30")
    dialog.check_button.click()
    await wait_until(lambda: dialog.address_invite_button.isEnabled(), 5, "Invite")
    dialog.address_invite_button.click()
    await wait_until(lambda: dialog.stack.currentIndex() == 0, 5, "back to the list")
    assert shown(dialog.address_message).startswith("No PAIR computer answers at 192.168.1.30")
    assert not shown(dialog.list_message)


async def test_closing_the_dialog_cancels_the_open_invite(rig: Rig, dialog: AddNodeDialog) -> None:
    await rig.start(lan(), with_member())
    rig.connection.script(methods.CLUSTER_INVITE, created())
    rig.connection.script(methods.CLUSTER_CANCEL, created("canceled")["invite"])
    dialog.rows[LAPTOP].invite_button.click()
    await wait_until(lambda: dialog.panel.invite is not None, 5, "the invite")
    dialog.reject()
    assert not dialog.isVisible()
    await wait_until(lambda: bool(rig.connection.called(methods.CLUSTER_CANCEL)), 5, "cancel")
    assert rig.connection.called(methods.CLUSTER_CANCEL) == [{"id": "inv-1"}]
    # Opened again, it shows the list, not the old invite.
    dialog.show()
    assert dialog.stack.currentIndex() == 0
