"""A model spread across members on the Models page: its row says which member holds which
share (and why a degraded spread is degraded, in the warning colour), "Load spread across
members…" sends the chosen members and shows the broker's refusal as it gave it, and the
Engines page's card says what an engine computes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.controllers.spread import NONE_CHOSEN
from app.models.engines import Host, RowExtras, managed_row
from app.models.models import LOADING, ModelsModel
from app.models.spread import share_text, shares_text, spread_status_text
from app.window.engine_card import detail_text
from app.window.look import State, state_colour
from app.window.models_page import MORE_TIP, RowActions
from app.window.spread_dialog import SpreadDialog
from backend.protocol import methods
from backend.protocol.errors import Conflict
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineStatus, SpreadShare, SpreadStatus
from tests.gui.helpers import settle, wait_until
from tests.gui.test_models_page import (
    SELF,
    Ui,
    close,
    engine,
    listing,
    make_ui,
    never,
    status,
)

BIG, SMALL = "llama-3.3-70b-q4_k_m", "tiny"
MAC, LAPTOP = "node-mac", "node-laptop"
MODELS = listing({"llamacpp": [BIG, SMALL]}, {"llamacpp": [BIG]})
SHARES = [
    {"node": SELF, "name": "gaming-pc", "layers": 33, "bytes": 16_500_000_000, "memory": "vram",
     "host": True},
    {"node": MAC, "name": "mac-mini", "layers": 47, "bytes": 23_500_000_000, "memory": "ram"},
]  # fmt: skip
SPREAD_TEXT = (
    "Spread: gaming-pc 33 layers (16.5 GB VRAM, runs it) · mac-mini 47 layers (23.5 GB RAM)"
)
LOST = "mac-mini was lost; gaming-pc serves the model alone on its CPU until it is back"
REFUSAL = (
    "the model needs 42.1 GB; the members have 30.5 GB free together (after keeping 10 % of "
    "each free)"
)


def llama(spread: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """llama.cpp's status, running ``BIG`` spread as ``spread`` says (None: alone)."""
    return {**engine("llamacpp"), **({"spread": spread} if spread else {}), **extra}


def spread(state: str = "running", reason: str = "") -> dict[str, Any]:
    return {"model": BIG, "state": state, "shares": SHARES, "reason": reason}


def member(node_id: str, name: str, *, reachable: bool = True) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "reachable": reachable,
        "engines": [engine("llamacpp")], "models": listing({"llamacpp": []}),
    }  # fmt: skip


MEMBERS = (member(MAC, "mac-mini"), member(LAPTOP, "laptop", reachable=False))


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = await make_ui(qtbot)
    yield made
    await close(made)


async def start(
    ui: Ui, status_of_llama: dict[str, Any], members: tuple[dict[str, Any], ...] = MEMBERS
) -> None:
    ui.connection.script(methods.STATUS, status())
    ui.events.script(status_of_llama, models=MODELS, members=members)
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": []})
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()


def status_cell(ui: Ui, model: str) -> tuple[str, str | None, Any]:
    """The Status cell of this computer's llama.cpp ``model``: text, tooltip, colour."""
    models = ui.controller.models
    position = models.position(ui.key("llamacpp", model))
    assert position is not None
    index = models.index(position, ModelsModel.STATUS_COLUMN)
    roles = (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole)
    text, tip = (index.data(role) for role in roles)
    return text, tip, index.data(Qt.ItemDataRole.ForegroundRole)


def test_a_share_names_its_member_layers_size_memory_and_who_runs_it() -> None:
    host = SpreadShare(node=NodeId(SELF), name="pc", layers=1, bytes=500_000_000, memory="vram")
    assert share_text(host) == "pc 1 layer (0.5 GB VRAM)"
    status = msgspec.convert(spread(), SpreadStatus)
    assert shares_text(status) == SPREAD_TEXT
    degraded = msgspec.convert(spread("degraded"), SpreadStatus)
    assert spread_status_text(degraded) == "Degraded: a member that holds a share was lost"


async def test_a_spread_models_row_says_which_member_holds_which_share(
    qtmodeltester: ModelTester, ui: Ui
) -> None:
    await start(ui, llama(spread()))
    text, tip, colour = status_cell(ui, BIG)
    assert text == SPREAD_TEXT
    assert tip is not None and tip.splitlines() == [
        f"{BIG} is spread over 2 computers:",
        "• gaming-pc: 33 layers, 16.5 GB of VRAM (runs the model)",
        "• mac-mini: 47 layers, 23.5 GB of RAM",
    ]
    assert colour == state_colour(State.OK)
    assert status_cell(ui, SMALL)[:2] == ("On disk", None), "only the spread model's row"
    qtmodeltester.check(ui.controller.models, force_py=True)
    ui.events.state(llama())  # the broker now runs it alone
    await settle()
    assert status_cell(ui, BIG)[:2] == ("Loaded", None)


async def test_a_degraded_spread_shows_its_reason_in_the_warning_colour(ui: Ui) -> None:
    await start(ui, llama(spread()))
    ui.events.state(llama(spread("degraded", LOST)))
    await settle()
    text, tip, colour = status_cell(ui, BIG)
    assert text == f"Degraded: {LOST}"
    assert colour == state_colour(State.WARN)
    assert tip is not None and tip.endswith(f"\n\nDegraded: {LOST}")
    assert "• mac-mini: 47 layers, 23.5 GB of RAM" in tip


async def test_a_members_spread_model_shows_its_shares_too(ui: Ui) -> None:
    host = {**member(MAC, "mac-mini"), "models": MODELS}
    host["engines"] = [llama(spread())]
    await start(ui, llama(), members=(host,))
    row = ui.controller.models.get(ui.key("llamacpp", BIG)._replace(node=NodeId(MAC)))
    assert row is not None and ui.controller.models.status_text(row) == SPREAD_TEXT


def actions(ui: Ui, model: str) -> RowActions:
    return ui.actions("llamacpp", model)


async def open_dialog(ui: Ui, model: str = SMALL) -> SpreadDialog:
    row_actions = actions(ui, model)
    assert row_actions.more.isVisibleTo(ui.page) and row_actions.more.toolTip() == MORE_TIP
    assert row_actions.spread_action.isEnabled(), row_actions.spread_action.toolTip()
    row_actions.spread_action.trigger()
    dialog = ui.page.models_tab.spread_dialog
    assert dialog is not None
    await wait_until(dialog.isVisible)
    return dialog


async def test_load_across_sends_the_ticked_members_and_closes_when_it_runs(ui: Ui) -> None:
    await start(ui, llama())
    dialog = await open_dialog(ui)
    assert set(dialog.boxes) == {MAC, LAPTOP}
    laptop = dialog.boxes[LAPTOP]
    assert not laptop.isEnabled() and "cannot be reached" in laptop.toolTip()
    dialog.load_button.click()
    assert dialog.message.text() == NONE_CHOSEN and dialog.message.isVisibleTo(dialog)
    assert ui.action_calls() == [], "nothing is sent without a member"
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    dialog.boxes[MAC].setChecked(True)
    dialog.load_button.click()
    assert ui.status_of("llamacpp", SMALL) == "Loading…"
    assert ui.pending.action(ui.key("llamacpp", SMALL)) == LOADING
    assert not dialog.load_button.isEnabled() and dialog.load_button.toolTip()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls() == [
        {"engine": "llamacpp", "action": "load_model", "model": SMALL, "across": [MAC]}
    ]
    answer.set_result({"ok": True})
    await wait_until(lambda: not dialog.isVisible())
    assert ui.pending.get(ui.key("llamacpp", SMALL)) is None
    assert not ui.page.notice.isVisibleTo(ui.page)


async def test_the_brokers_refusal_shows_in_the_dialog_as_it_gave_it(ui: Ui) -> None:
    await start(ui, llama())
    dialog = await open_dialog(ui)
    ui.connection.script(methods.ENGINE_ACTION, Conflict(REFUSAL))
    dialog.boxes[MAC].setChecked(True)
    dialog.load_button.click()
    await wait_until(lambda: dialog.message.text() == REFUSAL)
    assert dialog.isVisible() and dialog.load_button.isEnabled()
    assert ui.pending.get(ui.key("llamacpp", SMALL)) is None
    assert not ui.page.notice.isVisibleTo(ui.page), "said once, in the dialog"


async def test_a_refusal_after_the_dialog_closed_goes_to_the_page(ui: Ui) -> None:
    await start(ui, llama())
    dialog = await open_dialog(ui)
    answer = never()
    ui.connection.script(methods.ENGINE_ACTION, answer)
    dialog.boxes[MAC].setChecked(True)
    dialog.load_button.click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    dialog.reject()
    answer.set_exception(Conflict(REFUSAL))
    await wait_until(lambda: ui.page.notice.isVisibleTo(ui.page))
    assert ui.page.notice.message.text() == (
        f"Could not load {SMALL} spread over members: {REFUSAL}"
    )


async def test_the_spread_entry_says_why_it_is_disabled(ui: Ui) -> None:
    await start(ui, llama(spread()), members=())
    entry = actions(ui, SMALL).spread_action
    assert not entry.isEnabled()
    assert entry.toolTip().startswith("No other computer is paired with this one")
    running = actions(ui, BIG).spread_action
    assert not running.isEnabled() and running.toolTip().startswith("Spread over its members")
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.controller.load(ui.key("llamacpp", SMALL))
    await settle()
    assert actions(ui, SMALL).spread_action.toolTip() == "Loading… wait until it finishes."


async def test_only_llama_cpp_models_of_this_computer_offer_a_spread(ui: Ui) -> None:
    ui.connection.script(methods.STATUS, status())
    both = listing({"ollama": ["qwen3:8b"], "llamacpp": [SMALL]})
    ui.events.script(engine("ollama"), llama(), models=both, members=MEMBERS)
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": []})
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()
    assert not ui.actions("ollama", "qwen3:8b").more.isVisibleTo(ui.page)
    assert actions(ui, SMALL).more.isVisibleTo(ui.page)


def test_the_engine_card_says_what_the_engine_computes_on() -> None:
    fields = {key: value for key, value in engine("llamacpp").items() if key != "engine"}
    status = EngineStatus(engine=EngineName("llamacpp"), backend="CUDA 12.4", pid=42, **fields)
    row = managed_row(Host(NodeId(SELF), "desk", local=True), status, RowExtras())
    assert detail_text(row) == "runs on CUDA 12.4 · PID 42"
