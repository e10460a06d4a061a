"""The model hub's Hugging Face search against a scripted connection: results, a repository's
files with the one suggested for the pull computer's memory, "Pull into llama.cpp", the empty
state, failures said plainly, and a pull that never moves the hub's tables."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QWidget
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.catalog import load_catalog
from app.controllers.hub import HubController
from app.models.hub import HubFilesModel, HubResultsModel
from app.models.nodes import NodesModel
from app.window.models_page import ModelsPage
from backend.protocol import methods
from backend.protocol.errors import Unavailable
from backend.protocol.types.hub import HubFile, HubModel
from backend.protocol.types.nodes import DiscoveredNode
from tests.gui.helpers import settle, wait_until
from tests.gui.test_models_page import (
    MEMBER,
    PEER_NODE,
    SELF,
    SELF_NODE,
    Ui,
    close,
    engine,
    listing,
    make_ui,
    member,
    never,
    status,
)

REPO = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
BASE = f"https://huggingface.co/{REPO}/resolve/main/"
FOUND = {
    "models": [
        {"repo": REPO, "downloads": 123_456, "likes": 321, "updated": "2024-09-20T10:00:00Z",
         "pipeline": "text-generation"},
        {"repo": "bartowski/Qwen2.5-0.5B-Instruct-GGUF", "downloads": 950, "likes": 4},
    ]
}  # fmt: skip
SUGGESTED = "qwen2.5-0.5b-instruct-q8_0.gguf"
REASON = "Q8_0 (0.7 GB) is the largest that fits in 80% of 8.0 GB of memory, leaving the rest"
FILES = {
    "repo": REPO,
    "files": [
        {"name": "qwen2.5-0.5b-instruct-q4_k_m.gguf", "size": 491_000_000, "quant": "Q4_K_M",
         "url": BASE + "qwen2.5-0.5b-instruct-q4_k_m.gguf"},
        {"name": SUGGESTED, "size": 676_000_000, "quant": "Q8_0", "url": BASE + SUGGESTED},
        {"name": "qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf", "size": 1_270_000_000,
         "quant": "F16", "url": BASE + "qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf",
         "parts": 2},
    ],
    "suggested": SUGGESTED,
    "reason": REASON,
}  # fmt: skip
GPU_TELEMETRY = {"valid": True, "memory_total_bytes": 32_000_000_000,
                 "vram_total_bytes": 8_000_000_000}  # fmt: skip


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    made = await make_ui(qtbot)
    nodes = NodesModel()
    nodes.load([msgspec.convert({**SELF_NODE, "telemetry": GPU_TELEMETRY}, DiscoveredNode)])
    hub = HubController(made.controller, nodes)
    page = ModelsPage(made.controller, load_catalog(), hub)
    qtbot.addWidget(page)
    made.page.hide()
    made.page = page
    page.resize(1200, 800)
    page.show()
    page.tabs.setCurrentWidget(page.hub)
    page.hub.show_hugging_face()
    yield made
    await hub.close()
    await close(made)


async def start(ui: Ui, llama_state: str = "running", llama_installed: bool = True) -> None:
    ui.connection.script(methods.STATUS, status())
    llama = {**engine("llamacpp", llama_state), "installed": llama_installed}
    # The broker lists llama.cpp's files whenever it is installed (running or not).
    by_engine = {"ollama": ["qwen3:8b"], **({"llamacpp": ["tiny"]} if llama_installed else {})}
    ui.events.script(engine("ollama"), engine("lmstudio"), llama, models=listing(by_engine))
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": [SELF_NODE, PEER_NODE]})
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()


def hub(ui: Ui) -> HubController:
    return ui.page.hub.hub_controller


def search_for(ui: Ui, text: str) -> None:
    field = ui.page.hub.hugging_face.search
    field.setText(text)
    field.returnPressed.emit()


def result_repos(ui: Ui) -> list[str]:
    return [model.repo for model in hub(ui).results.rows()]


async def search_and_choose(ui: Ui) -> None:
    ui.connection.script(methods.HUB_SEARCH, FOUND)
    ui.connection.script(methods.HUB_FILES, FILES)
    search_for(ui, "qwen2.5 0.5b")
    await wait_until(lambda: hub(ui).search_state.phase == "done")
    view = ui.page.hub.hugging_face
    view.results.setCurrentIndex(hub(ui).results.index(0, 0))
    await wait_until(lambda: hub(ui).files_state.phase == "done")


@pytest.mark.parametrize("which", ["results", "files"])
def test_the_hub_models_pass_the_model_tester(qtmodeltester: ModelTester, which: str) -> None:
    if which == "results":
        results = HubResultsModel()
        results.reset([HubModel(repo="a/b", downloads=12_345, likes=2)])
        qtmodeltester.check(results, force_py=True)
    else:
        files = HubFilesModel()
        file = HubFile(name="m.gguf", size=10, url="https://h/m.gguf")
        files.show_files([file], "m.gguf")
        qtmodeltester.check(files, force_py=True)


async def test_a_search_lists_repositories_and_a_choice_lists_its_files(ui: Ui) -> None:
    await start(ui)
    await search_and_choose(ui)
    assert ui.connection.called(methods.HUB_SEARCH) == [{"query": "qwen2.5 0.5b", "limit": 20}]
    assert result_repos(ui) == [REPO, "bartowski/Qwen2.5-0.5B-Instruct-GGUF"]
    results = hub(ui).results
    assert [results.index(0, column).data() for column in range(4)] == [
        REPO, "123.5K", "321", "2024-09-20"]  # fmt: skip
    view = ui.page.hub.hugging_face
    assert view.results_stack.currentWidget() is view.results
    assert view.status.text().startswith("2 repositories with GGUF files")
    # The suggestion is for this computer's VRAM (it has a GPU), not its RAM.
    assert ui.connection.called(methods.HUB_FILES) == [
        {"repo": REPO, "memory_bytes": 8_000_000_000}]  # fmt: skip
    files = hub(ui).files
    assert [files.index(row, 0).data() for row in range(3)] == ["Q4_K_M", "Q8_0", "F16"]
    assert files.index(1, 1).data() == "676 MB"
    assert files.index(2, 2).data() == "qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf (2 parts)"
    chosen = view.chosen_file()
    assert chosen is not None and chosen.name == SUGGESTED, "the suggested file is selected"
    assert files.index(1, 0).data(0x6).bold(), "and stands out"  # Qt.FontRole
    assert view.suggestion.text() == f"Suggested for 8.0 GB of VRAM on this computer: {REASON}."


async def test_pull_into_llama_cpp_pulls_the_chosen_file_through_the_pull_path(ui: Ui) -> None:
    await start(ui)
    await search_and_choose(ui)
    view = ui.page.hub.hugging_face
    assert view.pull_button.isEnabled()
    assert view.pull_button.toolTip() == (
        "Download qwen2.5-0.5b-instruct-q8_0 into llama.cpp on this computer"
    )
    ui.connection.script(methods.ENGINE_ACTION, never())
    view.pull_button.click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    assert ui.action_calls()[0] == {
        "engine": "llamacpp", "action": "pull_model", "model": "qwen2.5-0.5b-instruct-q8_0",
        "url": BASE + SUGGESTED,
    }  # fmt: skip
    assert ui.key("llamacpp", "qwen2.5-0.5b-instruct-q8_0") in ui.page.pulls_panel.items
    assert view.pull_button.text() == "Pulling…" and not view.pull_button.isEnabled()


async def test_a_split_model_cannot_be_pulled_and_says_why(ui: Ui) -> None:
    await start(ui)
    await search_and_choose(ui)
    view = ui.page.hub.hugging_face
    view.files.setCurrentIndex(hub(ui).files.index(2, 0))
    assert not view.pull_button.isEnabled()
    assert "split into 2 files" in view.pull_button.toolTip()


async def test_llama_cpp_not_installed_says_how_to_install_and_stopped_still_pulls(
    ui: Ui,
) -> None:
    await start(ui, llama_state="not-installed", llama_installed=False)
    await search_and_choose(ui)
    button = ui.page.hub.hugging_face.pull_button
    assert not button.isEnabled()
    assert button.toolTip() == (
        "llama.cpp is not installed on this computer: install it on the Engines page "
        "(or run `pair engine install llamacpp` there)."
    )
    ui.events.state({**engine("llamacpp", "stopped"), "installed": True})
    ui.events.models(listing({"ollama": ["qwen3:8b"], "llamacpp": []}))
    await settle()
    assert button.isEnabled(), "its files are kept by PAIR: a stopped llama.cpp pulls too"


async def test_a_search_without_results_shows_an_empty_state(ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.HUB_SEARCH, {"models": []})
    search_for(ui, "no such model at all")
    await wait_until(lambda: hub(ui).search_state.phase == "done")
    view = ui.page.hub.hugging_face
    assert view.results_stack.currentWidget() is view.results_note
    assert view.results_note.isVisibleTo(ui.page) and not view.results.isVisibleTo(ui.page)
    assert view.results_note.text().startswith(
        "No GGUF model on Hugging Face matches “no such model at all”."
    )


async def test_the_curated_list_without_matches_shows_a_note_not_a_blank_table(ui: Ui) -> None:
    await start(ui)
    page = ui.page.hub
    page.show_hugging_face(False)
    page.search.setText("no such model anywhere")
    assert page.no_match.isVisibleTo(ui.page) and not page.table.isVisibleTo(ui.page)


async def test_an_offline_search_says_so_plainly(ui: Ui) -> None:
    await start(ui)
    reason = "Hugging Face did not answer: cannot connect to huggingface.co:443 (Name unknown)"
    ui.connection.script(methods.HUB_SEARCH, Unavailable(reason))
    search_for(ui, "llama")
    await wait_until(lambda: hub(ui).search_state.phase == "failed")
    text = ui.page.hub.hugging_face.status.text()
    assert text.startswith(f"Could not search: {reason}. This computer may be offline")
    assert "Unavailable" not in text and "<" not in text


async def test_searching_without_the_service_says_it_is_not_running(ui: Ui) -> None:
    search_for(ui, "llama")
    await settle()
    assert ui.connection.called(methods.HUB_SEARCH) == []
    assert ui.page.hub.hugging_face.status.text() == (
        "The PAIR service is not running: start it to search Hugging Face."
    )


async def test_typing_searches_once_after_a_pause_and_late_answers_are_dropped(
    qtbot: QtBot, ui: Ui
) -> None:
    await start(ui)
    view = ui.page.hub.hugging_face
    view.timer.setInterval(50)
    late: asyncio.Future[Any] = never()
    ui.connection.script(methods.HUB_SEARCH, late, {"models": [{"repo": "b/llama-GGUF"}]})
    for text in ("l", "ll", "lla"):
        view.search.setText(text)
        view.search.textEdited.emit(text)
    await wait_until(lambda: len(ui.connection.called(methods.HUB_SEARCH)) == 1)
    assert ui.connection.called(methods.HUB_SEARCH) == [{"query": "lla", "limit": 20}]
    search_for(ui, "llama")  # Enter searches at once
    await wait_until(lambda: hub(ui).search_state.phase == "done")
    late.set_result({"models": [{"repo": "a/stale-GGUF"}]})
    await settle()
    assert result_repos(ui) == ["b/llama-GGUF"]


def page_top(widget: QWidget, page: QWidget) -> int:
    return widget.mapTo(page, QPoint(0, 0)).y()


async def test_a_pull_starting_does_not_move_the_hub_tables(ui: Ui) -> None:
    await start(ui)
    await search_and_choose(ui)
    view, curated = ui.page.hub.hugging_face, ui.page.hub.table
    await settle()
    before = (page_top(view.results, ui.page), page_top(view.files, ui.page))
    ui.connection.script(methods.ENGINE_ACTION, never())
    view.pull_button.click()
    await wait_until(lambda: ui.page.pulls_panel.isVisibleTo(ui.page))
    await settle()
    assert (page_top(view.results, ui.page), page_top(view.files, ui.page)) == before
    ui.page.hub.show_hugging_face(False)
    await settle()
    top = page_top(curated, ui.page)
    ui.controller.pull("ollama", "gemma3:4b")  # a second pull: a second progress item
    await settle()
    assert page_top(curated, ui.page) == top


async def test_the_curated_list_pulls_llama_cpp_entries_by_their_file_address(ui: Ui) -> None:
    await start(ui)
    page = ui.page.hub
    page.show_hugging_face(False)
    pulls = page.entry_pulls("qwen2.5-0.5b")
    assert pulls is not None
    assert list(pulls.buttons) == ["ollama", "llamacpp"]
    button = pulls.buttons["llamacpp"]
    assert button.text() == "Pull · llama.cpp" and button.isEnabled()
    ui.connection.script(methods.ENGINE_ACTION, never())
    button.click()
    await wait_until(lambda: len(ui.action_calls()) == 1)
    call = ui.action_calls()[0]
    assert (call["engine"], call["model"]) == ("llamacpp", "qwen2.5-0.5b-instruct-q4_k_m")
    assert call["url"].endswith("/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    ollama = pulls.buttons["ollama"]
    assert ollama.text() == "Pull · Ollama"  # Ollama names still pull into Ollama


async def test_a_hub_button_names_an_engine_that_is_not_installed(ui: Ui) -> None:
    ui.connection.script(methods.STATUS, status())
    lmstudio = {**engine("lmstudio", "stopped"), "installed": False}
    ui.events.script(engine("ollama"), lmstudio, models=listing({"ollama": []}))
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": [SELF_NODE]})
    ui.connection.become_ready()
    await wait_until(lambda: ui.controller.node_id is not None and ui.controller.engines.loaded)
    await settle()
    ui.page.hub.show_hugging_face(False)
    pulls = ui.page.hub.entry_pulls("qwen3-8b")
    assert pulls is not None
    tip = pulls.buttons["lmstudio"].toolTip()
    assert tip.startswith("LM Studio is not installed on this computer: install it")
    assert "Start" not in tip
    assert ui.controller.node_id == SELF


async def test_another_pull_computer_gets_a_suggestion_for_its_own_memory(ui: Ui) -> None:
    laptop = {**PEER_NODE, "node_id": MEMBER, "name": "laptop",
              "telemetry": {"valid": True, "memory_total_bytes": 16_000_000_000}}  # fmt: skip
    nodes = hub(ui).nodes
    assert nodes is not None
    nodes.upsert(msgspec.convert(laptop, DiscoveredNode))
    ui.connection.script(methods.STATUS, status())
    llama = engine("llamacpp")
    theirs = {**member(engines=("ollama", "llamacpp")), "engines": [engine("ollama"), llama]}
    ui.events.script(engine("ollama"), llama, models=listing({"ollama": []}), members=(theirs,))
    ui.connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 10, "nodes": [SELF_NODE]})
    ui.connection.become_ready()
    await wait_until(lambda: MEMBER in ui.controller.engines.members)
    await search_and_choose(ui)
    ui.connection.script(methods.HUB_FILES, {**FILES, "suggested": None, "reason": "none fits"})
    ui.controller.set_pull_node(MEMBER)
    await wait_until(lambda: len(ui.connection.called(methods.HUB_FILES)) == 2)
    await wait_until(lambda: hub(ui).files_state.phase == "done")
    # No GPU there: the memory a model should fit in is its RAM.
    assert ui.connection.called(methods.HUB_FILES)[1] == {
        "repo": REPO, "memory_bytes": 16_000_000_000}  # fmt: skip
    assert ui.page.hub.hugging_face.suggestion.text() == "For 16 GB of RAM on laptop: none fits."


async def test_a_search_cut_short_by_the_service_going_away_says_so(ui: Ui) -> None:
    await start(ui)
    ui.connection.script(methods.HUB_SEARCH, never())
    search_for(ui, "llama")
    await wait_until(lambda: len(ui.connection.called(methods.HUB_SEARCH)) == 1)
    assert hub(ui).search_state.phase == "busy"
    ui.connection.lose_session()
    assert hub(ui).search_state.phase == "failed"
    assert ui.page.hub.hugging_face.status.text() == (
        "The PAIR service is not running: start it to search Hugging Face."
    )
