"""llama.cpp on the Models page like the other engines: offered in the Pull bar (by a .gguf
address), Load switches the model it serves, Delete is refused for that model with the broker's
reason, and a disabled button always says why; the Pull bar never collapses and the table's
right-hand columns give way first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from app.models.models import LOADING, ModelsModel, serves_one_model, supports
from app.window.models_pulls import NAME_MIN_CHARS
from backend.components.engines.manifest import bundled_documents
from backend.protocol import methods
from backend.protocol.errors import Conflict
from tests.gui.helpers import settle, wait_until
from tests.gui.test_models_page import (
    PEER_NODE,
    SELF,
    SELF_NODE,
    Ui,
    close,
    engine,
    listing,
    make_ui,
    never,
    status,
)

SERVED, OTHER = "qwen2.5-0.5b-instruct-q4_k_m", "tiny"
LLAMA = listing(
    {"ollama": ["qwen3:8b"], "llamacpp": [SERVED, OTHER]},
    {"ollama": [], "llamacpp": [SERVED]},
)
REFUSAL = (
    f"{SERVED} is the model llama.cpp (llama-server) serves right now; load another model or "
    "stop the engine before deleting it"
)


def test_the_app_treats_as_single_model_exactly_the_engines_whose_manifest_says_so() -> None:
    documents = bundled_documents()
    single = {
        name
        for name, document in documents.items()
        if document.get("scheduler", {}).get("single_model") is True
    }
    assert single == {"llamacpp"}
    assert {name for name in documents if serves_one_model(name)} == single
    for name in single:  # one model always served while it runs: no eject of its own
        assert not supports(name, "unload_model")
        assert all(supports(name, action) for action in ("load_model", "delete_model"))
        assert supports(name, "pull_model")


async def start_llama(ui: Ui, models: Any = LLAMA, llama_state: str = "running") -> None:
    ui.connection.script(methods.STATUS, status())
    ui.events.script(engine("ollama"), engine("llamacpp", llama_state), models=models)
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": [SELF_NODE, PEER_NODE]})
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = await make_ui(qtbot)
    yield made
    await close(made)


def engines_offered(ui: Ui) -> list[str]:
    combo = ui.page.pull_bar.engine_combo
    return [combo.itemText(index) for index in range(combo.count())]


async def test_the_pull_bar_offers_llama_cpp_and_pulls_a_model_file_by_its_address(
    ui: Ui,
) -> None:
    await start_llama(ui)
    bar = ui.page.pull_bar
    assert engines_offered(ui) == ["Ollama", "llama.cpp"]
    bar.engine_combo.setCurrentIndex(1)
    assert ".gguf" in bar.name_edit.placeholderText()
    bar.name_edit.setText("qwen3:8b")
    assert not bar.pull_button.isEnabled()
    assert bar.pull_button.toolTip() == (
        "llama.cpp pulls a model file: paste the address of a .gguf file."
    )
    url = "https://huggingface.co/o/r/resolve/main/Small-Q4_K_M.gguf"
    ui.connection.script(methods.ENGINE_ACTION, never())
    bar.name_edit.setText(url)
    assert bar.pull_button.isEnabled() and bar.pull_button.toolTip() == ""
    bar.pull_button.click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "llamacpp", "action": "pull_model", "model": "Small-Q4_K_M", "url": url
    }  # fmt: skip
    assert ui.key("llamacpp", "Small-Q4_K_M") in ui.page.pulls_panel.items


async def test_a_stopped_llama_cpp_keeps_its_files_to_load_pull_or_delete(ui: Ui) -> None:
    stopped = listing({"ollama": ["qwen3:8b"], "llamacpp": [SERVED, OTHER]})
    await start_llama(ui, models=stopped, llama_state="stopped")
    assert engines_offered(ui) == ["Ollama", "llama.cpp"], "its store pulls while stopped"
    buttons = ui.actions("llamacpp", OTHER).buttons
    assert buttons["load"].isEnabled() and buttons["delete"].isEnabled()
    assert buttons["load"].toolTip() == (
        f"Serve {OTHER} with llama.cpp (it holds one model at a time)."
    )


async def test_a_switch_keeps_the_rows_while_llama_cpp_restarts(ui: Ui) -> None:
    await start_llama(ui)
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.actions("llamacpp", OTHER).buttons["load"].click()
    for state in ("stopping", "starting"):
        ui.events.state(engine("llamacpp", state))
        await settle()
        assert ui.status_of("llamacpp", OTHER) == "Loading…", state


async def test_load_switches_the_served_model_and_says_it_replaces_it(ui: Ui) -> None:
    await start_llama(ui)
    load = ui.actions("llamacpp", OTHER).buttons["load"]
    assert load.isEnabled()
    assert load.toolTip() == (
        f"Serve {OTHER} instead of {SERVED}: llama.cpp holds one model at a time, so this "
        "replaces the model it serves now."
    )
    served = ui.actions("llamacpp", SERVED).buttons["load"]
    assert not served.isEnabled() and served.toolTip() == "llama.cpp serves this model now."
    ui.connection.script(methods.ENGINE_ACTION, never())
    load.click()
    assert ui.pending.action(ui.key("llamacpp", OTHER)) == LOADING
    assert ui.status_of("llamacpp", OTHER) == "Loading…"
    buttons = ui.actions("llamacpp", OTHER).buttons
    assert not buttons["delete"].isEnabled()
    assert buttons["delete"].toolTip() == "Loading… wait until it finishes."
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {"engine": "llamacpp", "action": "load_model", "model": OTHER}
    switched = listing({"ollama": ["qwen3:8b"], "llamacpp": [SERVED, OTHER]}, {"llamacpp": [OTHER]})
    ui.events.models(switched)
    assert ui.pending.get(ui.key("llamacpp", OTHER)) is None
    assert ui.status_of("llamacpp", OTHER) == "Loaded"


async def test_llama_cpp_has_no_eject_and_the_tooltip_says_what_to_do(ui: Ui) -> None:
    await start_llama(ui)
    for model in (SERVED, OTHER):
        eject = ui.actions("llamacpp", model).buttons["eject"]
        assert not eject.isEnabled()
        assert eject.toolTip() == (
            "llama.cpp holds one model at a time and has no eject: load another model to "
            "replace it, or stop llama.cpp on the Engines page."
        )


async def test_deleting_the_served_model_shows_the_brokers_refusal(
    monkeypatch: pytest.MonkeyPatch, ui: Ui
) -> None:
    await start_llama(ui)
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    delete = ui.actions("llamacpp", SERVED).buttons["delete"]
    assert delete.isEnabled()
    assert "refuses to delete it until another is loaded" in delete.toolTip()
    ui.connection.script(methods.ENGINE_ACTION, Conflict(REFUSAL))
    delete.click()
    await wait_until(lambda: ui.page.notice.isVisibleTo(ui.page))
    assert ui.action_calls() == [{"engine": "llamacpp", "action": "delete_model", "model": SERVED}]
    assert ui.page.notice.message.text() == (f"Could not delete {SERVED} (llama.cpp): {REFUSAL}")
    assert ui.pending.get(ui.key("llamacpp", SERVED)) is None


async def test_deleting_another_model_goes_through(monkeypatch: pytest.MonkeyPatch, ui: Ui) -> None:
    await start_llama(ui)
    monkeypatch.setattr(QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes)
    ui.connection.script(methods.ENGINE_ACTION, {"ok": True})
    ui.actions("llamacpp", OTHER).buttons["delete"].click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {"engine": "llamacpp", "action": "delete_model", "model": OTHER}


async def test_every_disabled_button_says_why(ui: Ui) -> None:
    await start_llama(ui)
    eject = ui.actions("ollama", "qwen3:8b").buttons["eject"]
    assert not eject.isEnabled() and eject.toolTip() == "Not loaded: nothing to eject."
    ui.connection.script(methods.ENGINE_ACTION, never())
    ui.controller.load(ui.key("ollama", "qwen3:8b"))
    shown = [("ollama", "qwen3:8b"), ("llamacpp", SERVED), ("llamacpp", OTHER)]
    for engine_name, model in shown:
        for button in ui.actions(engine_name, model).buttons.values():
            assert button.isEnabled() or button.toolTip(), (engine_name, model, button.text())


async def test_a_narrow_window_keeps_the_names_and_the_pull_field(qtbot: QtBot, ui: Ui) -> None:
    details = {"llamacpp": {SERVED: {"architecture": "qwen2", "quantization": "Q4_K_M"}}}
    await start_llama(ui, models={**LLAMA, "details_by_engine": details})
    table = ui.page.models_tab.table
    # Shown: a hidden widget's resize is held until it is shown, and its header keeps the
    # sections it had (whether that happened depended on what the machine had drawn before).
    ui.page.show()
    qtbot.waitExposed(ui.page)
    ui.page.resize(1400, 700)
    await settle()
    qtbot.waitUntil(lambda: table.viewport().width() > 1000, timeout=5000)
    wide = {column: table.columnWidth(column) for column in range(7)}
    ui.page.resize(640, 480)
    qtbot.waitUntil(lambda: table.columnWidth(ModelsModel.STATUS_COLUMN) < wide[5], timeout=5000)
    model_column = 2
    assert table.columnWidth(model_column) == wide[model_column], "names keep their width"
    assert table.columnWidth(model_column) >= table.sizeHintForColumn(model_column)
    assert table.columnWidth(ModelsModel.DETAILS_COLUMN) < wide[ModelsModel.DETAILS_COLUMN]
    name_edit = ui.page.pull_bar.name_edit
    # Room for NAME_MIN_CHARS characters of this machine's font, whatever the font is.
    least = name_edit.fontMetrics().averageCharWidth() * NAME_MIN_CHARS
    assert name_edit.width() >= name_edit.minimumWidth() >= least > 0
    assert SELF in ui.controller.models.nodes()
