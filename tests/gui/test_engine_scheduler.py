"""The scheduler line of this computer's engine cards: its text, taken from the engine snapshot
and from ``scheduler_changed`` pushes through the engines model (a role, row-level changes),
hidden while the scheduler has no news, and never on another member's cards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.models.engines import SCHEDULER_ROLE
from app.models.scheduler_text import has_news, scheduler_line, scheduler_tip
from app.window.engine_card import EngineCard
from backend.protocol import methods
from backend.protocol.errors import Conflict
from backend.protocol.types.base import EngineName
from backend.protocol.types.scheduler import (
    ExclusiveOperation,
    ModelQueue,
    SchedulerState,
    SlotOwners,
)
from tests.gui.helpers import settle, wait_until
from tests.gui.test_engines import (
    MEMBER,
    SELF,
    Ui,
    broker_status,
    close_ui,
    engine,
    make_ui,
    member,
    member_node,
    myself,
)

LLAMACPP = EngineName("llamacpp")

BUSY = SchedulerState(
    engine=LLAMACPP,
    single_model=True,
    ceiling=2,
    idle=0,
    running=2,
    waiting=3,
    queues=[ModelQueue(model="qwen", running=2, waiting=2), ModelQueue(model="tiny", waiting=1)],
    resident="qwen",
    turn="qwen",
    exclusive=ExclusiveOperation(kind="delete", model="tiny"),
    slot_owners=SlotOwners(sessions=2, fresh=1),
)
BUSY_LINE = (
    "2 running · 3 waiting (qwen 2, tiny 1) · turn: qwen · deleting tiny after them"
    " · slots: 2 sessions, 1 fresh"
)


def states(*engines: dict[str, Any]) -> dict[str, Any]:
    """A raw ``SchedulerStates``."""
    return {"engines": list(engines)}


def raw(state: SchedulerState) -> dict[str, Any]:
    """``state`` as on the wire."""
    wire: dict[str, Any] = msgspec.to_builtins(state)
    return wire


IDLE_OLLAMA = {"engine": "ollama", "ceiling": 4, "slot_owners": {"sessions": 1}}


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = make_ui(qtbot)
    yield made
    await close_ui(made)


async def ready(ui: Ui, scheduler: dict[str, Any] | None, **snapshot: Any) -> None:
    statuses = (engine("ollama", "running"), engine("llamacpp", "running"))
    ui.connection.script(methods.STATUS, broker_status())
    ui.events.script(*statuses, scheduler=scheduler, **snapshot)
    nodes = [myself(), member_node()] if "members" in snapshot else [myself()]
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 3, "nodes": nodes})
    ui.connection.become_ready()
    await wait_until(lambda: len(ui.model.node_rows(SELF)) == 2)
    await settle()


def role_text(ui: Ui, name: str, node: str = SELF) -> Any:
    position = ui.model.position((node, name))
    assert position is not None
    return ui.model.data(ui.model.index(position, 0), SCHEDULER_ROLE)


# -- the line ----------------------------------------------------------------------------------


def test_a_busy_one_model_engine_reads_as_one_compact_line() -> None:
    assert scheduler_line(BUSY) == BUSY_LINE
    tip = scheduler_tip(BUSY).splitlines()
    assert tip == [
        "2 slots, 0 idle",
        "qwen: 2 running, 2 waiting",
        "tiny: 0 running, 1 waiting",
        "One model at a time; loaded: qwen",
        "Slots last given to: 2 sessions, 0 keyless requests; 1 not used since the engine started",
    ]


def test_the_line_says_only_what_there_is() -> None:
    switching = SchedulerState(
        engine=LLAMACPP,
        single_model=True,
        waiting=1,
        queues=[ModelQueue(model="tiny", waiting=1)],
        resident="qwen",
        turn="tiny",
        exclusive=ExclusiveOperation(kind="switch", model="tiny"),
        exclusive_waiting=2,
    )
    assert scheduler_line(switching) == (
        "1 waiting (tiny 1) · turn: tiny (qwen loaded) · switching to tiny (+2 more)"
    )
    queued = SchedulerState(engine=LLAMACPP, running=1, exclusive_waiting=1)
    assert scheduler_line(queued) == "1 running · 1 operation waiting"
    owners = SlotOwners(sessions=1, keyless=1, fresh=0)
    keyless = SchedulerState(engine=LLAMACPP, running=1, slot_owners=owners)
    assert scheduler_line(keyless) == "1 running · slots: 1 session, 1 keyless"


def test_a_scheduler_without_work_an_operation_or_a_turn_has_no_line() -> None:
    idle = SchedulerState(engine=LLAMACPP, ceiling=4, idle=4, slot_owners=SlotOwners(fresh=4))
    assert not has_news(idle) and not has_news(None)
    assert scheduler_line(idle) == scheduler_tip(idle) == ""
    assert has_news(SchedulerState(engine=LLAMACPP, turn="qwen"))


# -- the cards ---------------------------------------------------------------------------------


async def test_the_snapshots_scheduler_shows_on_the_busy_engines_card_only(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await ready(ui, states(raw(BUSY), IDLE_OLLAMA))
    qtmodeltester.check(ui.model, force_py=True)
    card = ui.card("llamacpp")
    assert card.scheduler.isVisibleTo(ui.page)
    assert card.scheduler.text() == role_text(ui, "llamacpp") == BUSY_LINE
    assert "2 slots, 0 idle" in card.scheduler.toolTip()
    assert not ui.card("ollama").scheduler.isVisibleTo(ui.page), "idle: no line"
    assert role_text(ui, "ollama") == ""
    assert b"scheduler" in ui.model.roleNames().values()


async def test_a_scheduler_push_changes_only_the_rows_whose_scheduler_changed(
    qtbot: QtBot, ui: Ui
) -> None:
    await ready(ui, states(IDLE_OLLAMA))
    card = ui.card("llamacpp")
    assert not card.scheduler.isVisibleTo(ui.page)
    changed: list[int] = []
    ui.model.dataChanged.connect(lambda top, bottom: changed.append(top.row()))
    with qtbot.assertNotEmitted(ui.model.modelReset), qtbot.waitSignal(ui.model.dataChanged):
        ui.events.scheduler(states(raw(BUSY), IDLE_OLLAMA))
    assert changed == [ui.model.position((SELF, "llamacpp"))]
    assert card.scheduler.text() == BUSY_LINE and card.scheduler.isVisibleTo(ui.page)
    assert ui.card("llamacpp") is card, "updated in place"
    with qtbot.waitSignal(ui.model.dataChanged):
        ui.events.scheduler(states())  # the worker restarted: nothing queued any more
    assert not card.scheduler.isVisibleTo(ui.page)
    assert ui.controller.engines.scheduler(LLAMACPP) is None


async def test_an_older_broker_without_schedulers_shows_no_line(ui: Ui) -> None:
    await ready(ui, None)
    assert ui.controller.engines.scheduler(LLAMACPP) is None
    assert not ui.card("llamacpp").scheduler.isVisibleTo(ui.page)


async def test_a_members_cards_keep_no_scheduler_line(ui: Ui) -> None:
    members = [member(engine("llamacpp", "running"))]
    await ready(ui, states(raw(BUSY)), members=members)
    await wait_until(lambda: ui.page.card(MEMBER, "llamacpp") is not None)
    assert ui.card("llamacpp").scheduler.isVisibleTo(ui.page)
    theirs = ui.card("llamacpp", MEMBER)
    assert not theirs.scheduler.isVisibleTo(ui.page)
    assert ui.row("llamacpp", MEMBER).scheduler is None
    assert role_text(ui, "llamacpp", MEMBER) == ""


async def test_a_lost_session_forgets_the_schedulers(ui: Ui) -> None:
    await ready(ui, states(raw(BUSY)))
    ui.connection.lose_session()
    await settle()
    assert ui.controller.engines.scheduler(LLAMACPP) is None


# -- a steady card -----------------------------------------------------------------------------


def geometry(card: EngineCard) -> tuple[int, int, int]:
    """The card's height and where its port field and Restart button sit, once laid out."""
    layout = card.layout()
    assert layout is not None
    layout.activate()
    return (
        card.sizeHint().height(),
        card.port_edit.mapTo(card, QPoint(0, 0)).y(),
        card.restart_button.mapTo(card, QPoint(0, 0)).y(),
    )


async def test_the_card_keeps_its_height_as_the_scheduler_line_comes_and_goes(
    qtbot: QtBot, ui: Ui
) -> None:
    await ready(ui, states(IDLE_OLLAMA))
    card = ui.card("llamacpp")
    idle = geometry(card)
    with qtbot.waitSignal(ui.model.dataChanged):
        ui.events.scheduler(states(raw(BUSY), IDLE_OLLAMA))
    assert card.scheduler.isVisibleTo(ui.page)
    assert geometry(card) == idle, "the port field and buttons must not move"
    with qtbot.waitSignal(ui.model.dataChanged):
        ui.events.scheduler(states(IDLE_OLLAMA))
    assert not card.scheduler.isVisibleTo(ui.page)
    assert geometry(card) == idle


async def test_a_refused_port_shows_beside_its_field_and_stays_while_requests_run(
    qtbot: QtBot, ui: Ui
) -> None:
    await ready(ui, states(IDLE_OLLAMA))
    card = ui.card("llamacpp")
    idle = geometry(card)
    card.port_edit.setText("80")
    card.apply_port_button.click()
    await wait_until(lambda: card.port_error.isVisibleTo(ui.page))
    assert card.port_error.text() == "The port must be from 1024 to 65535."
    assert geometry(card) == idle, "the error line takes no room of its own"
    row_top = card.port_edit.mapTo(card, QPoint(0, 0)).y()
    assert card.port_error.mapTo(card, QPoint(0, 0)).y() >= row_top
    assert card.port_error.mapTo(card, QPoint(0, 0)).y() < row_top + card.port_edit.height()
    for scheduler in (states(raw(BUSY), IDLE_OLLAMA), states(IDLE_OLLAMA)):
        with qtbot.waitSignal(ui.model.dataChanged):
            ui.events.scheduler(scheduler)
        assert card.port_error.isVisibleTo(ui.page), "a request does not blink the error away"
        assert geometry(card) == idle


async def test_editing_the_port_clears_the_error_of_the_port_typed_before(ui: Ui) -> None:
    await ready(ui, states(IDLE_OLLAMA))
    card = ui.card("ollama")
    ui.connection.script(methods.ENGINE_SET_PORT, Conflict("Port 47533 is already in use"))
    card.port_edit.setText("47533")
    card.port_edit.setModified(True)
    card.apply_port_button.click()
    await wait_until(lambda: card.port_error.text() == "Port 47533 is already in use")
    QTest.keyClick(card.port_edit, Qt.Key.Key_Backspace)  # the user edits: the refusal is stale
    await wait_until(lambda: not card.port_error.isVisibleTo(ui.page))
    assert ui.row("ollama").port_error is None
    assert card.port_edit.text() == "4753", "what the user typed stays"
