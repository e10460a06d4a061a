"""``PAIR_QUIT_WHEN_READY=1``: the app reports its first paint and its connection, then quits."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from app.broker.state import Ownership, ServiceState
from app.options import parse_options
from app.quit_when_ready import WINDOW_SHOWN, QuitWhenReady
from tests.gui.helpers import FakeConnection, wait_until


def test_the_environment_variable_turns_it_on() -> None:
    assert parse_options([], {"PAIR_QUIT_WHEN_READY": "1"}).quit_when_ready
    assert not parse_options([], {}).quit_when_ready


async def test_it_quits_once_the_window_is_drawn_and_the_broker_attached(qtbot: QtBot) -> None:
    connection, window, lines, quits = FakeConnection(), QWidget(), [], []
    qtbot.addWidget(window)
    QuitWhenReady(connection, window, lambda: quits.append(1), lines.append)
    connection.become_ready(Ownership.ATTACHED)
    assert lines == ["quit-when-ready: ready, attached broker pid 4242"] and not quits
    window.show()
    await wait_until(lambda: bool(quits), 10.0, "the quit request")
    assert lines[1:] == [WINDOW_SHOWN] and quits == [1]


async def test_a_failed_connection_quits_at_once(qtbot: QtBot) -> None:
    connection, window, lines, quits = FakeConnection(), QWidget(), [], []
    qtbot.addWidget(window)
    QuitWhenReady(connection, window, lambda: quits.append(1), lines.append)
    connection.lose_session(ServiceState.FAILED)
    assert quits == [1] and lines[0].startswith("quit-when-ready: failed")
