"""First run: the welcome dialog appears once, finds engines, starts or installs them, offers a
first model that fits this computer (pulled with its progress in place, loaded into llama.cpp),
opens the Playground with it, and says where apps connect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.catalog import Catalog, load_catalog
from app.controllers.activity import ActivityController
from app.controllers.endpoints import EndpointsController
from app.controllers.hub import Memory
from app.controllers.models import ModelsController
from app.controllers.welcome_model import (
    FirstModelController,
    Here,
    choose_model,
    first_model_state,
    pull_engine,
)
from app.models.errors import ErrorsModel
from app.models.nodes import NodesModel
from app.pending import PendingActions
from app.stores.settings import SettingsStore
from app.window.playground_page import PlaygroundPage
from app.window.welcome import (
    DEMO_NOT_INSTALLED,
    WELCOME_SHOWN_KEY,
    Welcome,
    WelcomeDialog,
    endpoints_text,
    engine_state_text,
    welcome_shown,
)
from backend.protocol import methods
from backend.protocol.errors import InternalError
from backend.protocol.types.engines import EngineStatus
from backend.protocol.types.nodes import DiscoveredNode
from tests.gui.helpers import EngineEvents, FakeConnection, Stores, settle, wait_until
from tests.gui.playground_rig import LOCAL_MODELS, start_rig

CATALOG = load_catalog()
DOORS = {
    "ollama": "http://127.0.0.1:11434",
    "openai": "http://127.0.0.1:1234",
    "llamacpp": "http://127.0.0.1:8080",
}


def engine(name: str, state: str, **extra: Any) -> dict[str, Any]:
    names = {"ollama": "Ollama", "lmstudio": "LM Studio", "llamacpp": "llama.cpp (llama-server)"}
    return {
        "engine": name, "display_name": names[name], "front_door": "ollama", "mode": "process",
        "installed": state != "not-installed", "state": state, "port": 11435,
        "default_port": 11435, **extra,
    }  # fmt: skip


ENGINES = [
    engine("llamacpp", "not-installed"),
    engine("lmstudio", "stopped"),
    engine("ollama", "running"),
]


def status(front_doors: dict[str, str]) -> dict[str, Any]:
    return {
        "version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
        "node_id": "n1", "node_name": "pc", "control_address": "/c", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": [], "front_doors": front_doors,
    }  # fmt: skip


@dataclass
class FirstRun:
    connection: FakeConnection
    activity: ActivityController
    endpoints: EndpointsController
    preferences: QSettings
    welcome: Welcome
    engines: EngineEvents
    models: ModelsController
    tried: list[str]
    nodes: NodesModel


@pytest.fixture
def preferences_file(tmp_path: Path) -> Path:
    return tmp_path / "PAIR.ini"


@pytest.fixture
async def first_run(
    qapp: QApplication, qtbot: QtBot, preferences_file: Path
) -> AsyncIterator[FirstRun]:
    # As in the app: closing the last window (here the dialog) must not stop the event loop.
    quit_on_close = qapp.quitOnLastWindowClosed()
    qapp.setQuitOnLastWindowClosed(False)
    connection = FakeConnection()
    stores = Stores.build(connection)
    activity = ActivityController(connection, ErrorsModel(), stores.jobs, stores.engines)
    settings = SettingsStore(connection)
    endpoints = EndpointsController(connection, stores.engines, settings)
    preferences = QSettings(str(preferences_file), QSettings.Format.IniFormat)
    models = ModelsController(connection, PendingActions(), stores.engines, stores.discovery)
    tried: list[str] = []
    nodes = NodesModel()
    welcome = Welcome(
        connection,
        activity,
        endpoints,
        preferences,
        models=models,
        nodes=nodes,
        catalog=CATALOG,
        open_playground=tried.append,
    )
    events = EngineEvents(connection)
    yield FirstRun(
        connection, activity, endpoints, preferences, welcome, events, models, tried, nodes
    )
    if welcome.dialog is not None:
        welcome.dialog.close()
        welcome.dialog.deleteLater()
    for controller in (activity, endpoints, models):
        await controller.close()
    await stores.close()
    await settings.close()
    await connection.stop()
    qapp.setQuitOnLastWindowClosed(quit_on_close)


def script_session(
    connection: FakeConnection, engines: list[dict[str, Any]], models: dict[str, Any] | None = None
) -> None:
    for _ in range(4):
        connection.script(methods.STATUS, status(DOORS))
        EngineEvents(connection).script(*engines, models=models)
    connection.script(methods.ENGINE_GET_INSTALLED, [e for e in engines if e["installed"]])


def test_endpoints_text_names_the_real_urls_in_two_sentences() -> None:
    text = endpoints_text({**DOORS, "openai": "http://127.0.0.1:41873"})
    assert "http://127.0.0.1:11434" in text
    assert "OpenAI API to http://127.0.0.1:41873/v1." in text
    assert "every model of every computer" in text and "LM Studio models" not in text
    assert text.count(". ") + 1 == 2 and text.endswith(".")
    only_ollama = endpoints_text({"ollama": "http://127.0.0.1:11434"})
    assert "OpenAI API to http://127.0.0.1:11434/v1" in only_ollama, "any door serves it"
    assert only_ollama.startswith("Apps that speak the Ollama API connect to http://127.0.0.1")
    closed = endpoints_text({})
    assert "http" not in closed
    assert closed.count(". ") + 1 == 2


async def test_shown_once_on_the_first_ready_session(
    first_run: FirstRun, preferences_file: Path
) -> None:
    assert getattr(first_run.welcome, "dialog") is None  # noqa: B009 (no narrowing for mypy)
    script_session(first_run.connection, ENGINES)
    first_run.connection.become_ready()
    dialog = first_run.welcome.dialog
    assert dialog is not None
    assert dialog.isVisible()
    assert not welcome_shown(first_run.preferences)
    dialog.done_button.click()
    assert not dialog.isVisible()
    reread = QSettings(str(preferences_file), QSettings.Format.IniFormat)
    assert reread.value(WELCOME_SHOWN_KEY, type=bool) is True
    # A reconnect in this run does not bring it back ...
    first_run.connection.lose_session()
    first_run.connection.become_ready()
    assert first_run.welcome.dialog is dialog
    assert not dialog.isVisible()
    await settle()


async def test_not_shown_when_the_flag_is_set(first_run: FirstRun) -> None:
    # ... and neither does the next start of the app.
    first_run.preferences.setValue(WELCOME_SHOWN_KEY, True)
    later = Welcome(
        first_run.connection,
        first_run.activity,
        first_run.endpoints,
        first_run.preferences,
        models=first_run.models,
        nodes=NodesModel(),
        catalog=CATALOG,
        open_playground=first_run.tried.append,
    )
    script_session(first_run.connection, ENGINES)
    first_run.connection.become_ready()
    assert later.dialog is None
    assert first_run.welcome.dialog is None
    await settle()


async def test_closing_the_dialog_any_way_counts_as_shown(first_run: FirstRun) -> None:
    script_session(first_run.connection, ENGINES)
    first_run.connection.become_ready()
    assert first_run.welcome.dialog is not None
    first_run.welcome.dialog.reject()  # Escape or the window's close button
    assert welcome_shown(first_run.preferences)
    await settle()


async def test_engines_are_found_and_offer_start_or_install(first_run: FirstRun) -> None:
    script_session(first_run.connection, ENGINES)
    first_run.connection.become_ready()
    dialog = first_run.welcome.dialog
    assert dialog is not None
    rows = dialog.engine_rows
    await wait_until(lambda: len(rows.names) == 3, 5, "three engine rows")
    assert methods.ENGINE_GET_INSTALLED.name in [method for method, _ in first_run.connection.calls]
    assert rows.searching.isHidden()
    assert [rows.names[name].text() for name in rows.names] == [
        "<b>Ollama</b>",
        "<b>LM Studio</b>",
        "<b>llama.cpp (llama-server)</b>",
    ]
    assert rows.states["ollama"].text() == "Running"
    assert rows.buttons["ollama"].isHidden()
    assert rows.states["lmstudio"].text() == "Installed"
    assert rows.buttons["lmstudio"].text() == "Start"
    assert rows.states["llamacpp"].text() == "Not installed"
    assert rows.buttons["llamacpp"].text() == "Install"
    await wait_until(lambda: "127.0.0.1" in dialog.endpoints_label.text(), 5, "the URLs")
    shown = dialog.endpoints_label.text().replace("\N{WORD JOINER}", "")
    assert "http://127.0.0.1:11434" in shown
    assert "http://127.0.0.1:1234/v1" in shown


async def test_start_and_install_call_the_broker(first_run: FirstRun) -> None:
    connection = first_run.connection
    script_session(connection, ENGINES)
    connection.become_ready()
    assert first_run.welcome.dialog is not None
    rows = first_run.welcome.dialog.engine_rows
    await wait_until(lambda: len(rows.names) == 3, 5, "three engine rows")
    connection.script(methods.ENGINE_START, engine("lmstudio", "running"))
    rows.buttons["lmstudio"].click()
    await settle()
    first_run.engines.state(engine("lmstudio", "running"))
    await wait_until(lambda: rows.states["lmstudio"].text() == "Running", 5, "LM Studio running")
    assert (methods.ENGINE_START.name, {"engine": "lmstudio"}) in connection.calls
    assert rows.buttons["lmstudio"].isHidden()
    # Installing: progress pushes show in the row, the result replaces them.
    install: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.ENGINE_INSTALL, install)
    rows.buttons["llamacpp"].click()
    await settle()
    assert (methods.ENGINE_INSTALL.name, {"engine": "llamacpp"}) in connection.calls
    assert not rows.buttons["llamacpp"].isEnabled()
    assert rows.buttons["llamacpp"].text() == "Installing…"
    first_run.engines.install({"engine": "llamacpp", "stage": "downloading", "percent": 42.0})
    assert rows.states["llamacpp"].text() == "Downloading 42%"
    first_run.engines.install({"engine": "llamacpp", "stage": "installed", "done": True})
    first_run.engines.state(engine("llamacpp", "stopped"))
    install.set_result(engine("llamacpp", "stopped"))
    await wait_until(lambda: rows.buttons["llamacpp"].text() == "Start", 5, "installed")
    assert rows.states["llamacpp"].text() == "Installed"


async def test_a_failed_install_is_shown_in_the_row(first_run: FirstRun) -> None:
    connection = first_run.connection
    script_session(connection, ENGINES)
    connection.become_ready()
    assert first_run.welcome.dialog is not None
    rows = first_run.welcome.dialog.engine_rows
    await wait_until(lambda: len(rows.names) == 3, 5, "three engine rows")
    connection.script(methods.ENGINE_INSTALL, InternalError("offline: cannot reach github.com"))
    rows.buttons["llamacpp"].click()
    await wait_until(lambda: rows.buttons["llamacpp"].isEnabled(), 5, "the failure")
    assert rows.states["llamacpp"].text() == "offline: cannot reach github.com"
    assert rows.buttons["llamacpp"].text() == "Install"


LONG_ERROR = (
    "install llama.cpp (llama-server) failed: llama.cpp (llama-server) was installed but PAIR "
    "cannot find it; look in ~/.local/share/pair/engines/llamacpp and check that the binary runs"
)


async def test_an_install_shows_its_pending_state_and_then_its_whole_error(
    qtbot: QtBot, first_run: FirstRun
) -> None:
    connection = first_run.connection
    script_session(connection, ENGINES)
    connection.become_ready()
    dialog = first_run.welcome.dialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    rows = dialog.engine_rows
    await wait_until(lambda: len(rows.names) == 3, 5, "three engine rows")
    install: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.ENGINE_INSTALL, install)
    rows.buttons["llamacpp"].click()
    await settle()
    assert rows.states["llamacpp"].text().startswith("Installing")  # before any progress
    install.set_exception(InternalError(LONG_ERROR))
    await wait_until(lambda: rows.buttons["llamacpp"].isEnabled(), 5, "the failure")
    label = rows.states["llamacpp"]
    assert label.text() == LONG_ERROR
    await wait_until(lambda: label.height() >= label.heightForWidth(label.width()), 5, "room")
    assert label.wordWrap() and label.width() < label.fontMetrics().horizontalAdvance(LONG_ERROR)


async def test_the_demo_explains_instead_of_offering_an_install_that_cannot_work(
    qtbot: QtBot, first_run: FirstRun
) -> None:
    script_session(first_run.connection, ENGINES)
    first_run.connection.become_ready()
    dialog = WelcomeDialog(
        first_run.activity, first_run.endpoints, first_run.welcome.first_model, demo=True
    )
    qtbot.addWidget(dialog)
    rows = dialog.engine_rows
    await wait_until(lambda: len(rows.names) == 3, 5, "three engine rows")
    assert rows.buttons["llamacpp"].isHidden()
    assert rows.states["llamacpp"].text() == DEMO_NOT_INSTALLED
    assert not rows.buttons["lmstudio"].isHidden()  # an installed engine still starts


def test_an_engine_error_shows_no_python_repr() -> None:
    failed = msgspec.convert(engine("ollama", "error"), EngineStatus)
    text = engine_state_text(failed, None, "Cannot connect ssl:<ssl.SSLContext object at 0x7f01>")
    assert text == "Cannot connect"


SMALL = "qwen2.5-0.5b-instruct-q4_k_m"  # the smallest first model, as llama.cpp lists it
GB = 1_000_000_000


def listed(engine_name: str, *names: str, loaded: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "models": list(names), "by_engine": {engine_name: list(names)},
        "loaded_by_engine": {engine_name: list(loaded)}, "slots_by_engine": {},
    }  # fmt: skip


def test_the_first_model_fits_the_memory_and_goes_where_it_can_be_served() -> None:
    entries = CATALOG.entries
    roomy = choose_model(entries, "llamacpp", Memory(16 * GB, "RAM"))
    assert roomy is not None and roomy.entry.id == "qwen2.5-1.5b"
    assert roomy.source.endswith(".gguf") and roomy.name == "qwen2.5-1.5b-instruct-q4_k_m"
    small = choose_model(entries, "llamacpp", Memory(4 * GB, "RAM"))  # 1.1 GB is over 1/8
    assert small is not None and small.name == SMALL
    unknown = choose_model(entries, "ollama", None)
    assert unknown is not None and unknown.source == "qwen2.5:0.5b"
    assert choose_model((), "llamacpp", None) is None

    def statuses(*rows: dict[str, Any]) -> dict[Any, EngineStatus]:
        converted = (msgspec.convert(row, EngineStatus) for row in rows)
        return {status.engine: status for status in converted}

    not_installed = statuses(engine("llamacpp", "not-installed"), engine("ollama", "running"))
    assert pull_engine(not_installed, installing=False) == "ollama"
    assert pull_engine(not_installed, installing=True) == "llamacpp"
    assert pull_engine(statuses(engine("llamacpp", "stopped")), installing=False) == "llamacpp"
    assert pull_engine(statuses(engine("ollama", "stopped")), installing=False) is None


async def open_dialog(first_run: FirstRun, engines: list[dict[str, Any]], **models: Any) -> Any:
    script_session(first_run.connection, engines, models.get("models"))
    first_run.connection.become_ready()
    dialog = first_run.welcome.dialog
    assert dialog is not None
    await wait_until(lambda: first_run.models.node_id is not None, 5, "this node's id")
    await wait_until(lambda: len(dialog.engine_rows.names) == len(engines), 5, "the rows")
    return dialog


async def test_a_first_model_is_pulled_loaded_and_tried_from_the_dialog(
    first_run: FirstRun,
) -> None:
    connection, events = first_run.connection, first_run.engines
    dialog = await open_dialog(first_run, [engine("llamacpp", "stopped")])
    box, try_button = dialog.first_model, dialog.try_box.try_button
    await wait_until(lambda: box.pull_button.isVisibleTo(dialog), 5, "the offer")
    assert box.heading.text() == "<b>Qwen2.5 0.5B Instruct</b> · 491 MB"
    assert "; llama.cpp will serve it." in box.offer.text()
    assert not try_button.isEnabled()
    pull: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.ENGINE_ACTION, pull)
    box.pull_button.click()
    await settle()
    sent = connection.called(methods.ENGINE_ACTION)[-1]
    assert sent["action"] == "pull_model" and sent["url"].endswith(f"/{SMALL}.gguf")
    assert box.pull_button.isHidden() and box.progress.isVisibleTo(dialog)
    progress = {"engine": "llamacpp", "model": SMALL, "stage": "downloading", "percent": 40.0,
                "completed": 196_000_000, "total": 491_000_000}  # fmt: skip
    events.pull(progress)
    await wait_until(lambda: box.progress.value() == 40, 5, "the progress")
    assert box.status.text() == "Downloading… 196 MB of 491 MB"
    # Done and listed, but llama.cpp serves nothing yet: the step loads the file into it.
    connection.script(methods.ENGINE_ACTION, {"ok": True})
    events.models(listed("llamacpp", SMALL))
    events.pull({**progress, "stage": "done", "percent": 100.0, "done": True})
    pull.set_result({"ok": True})
    await wait_until(lambda: len(connection.called(methods.ENGINE_ACTION)) == 2, 5, "the load")
    load = connection.called(methods.ENGINE_ACTION)[-1]
    assert (load["action"], load["model"]) == ("load_model", SMALL)
    assert box.status.text() == "Loading it into llama.cpp…"
    assert not try_button.isEnabled()
    events.models(listed("llamacpp", SMALL, loaded=(SMALL,)))
    await wait_until(try_button.isEnabled, 5, "the model to be ready")
    assert box.status.text() == f"Ready on this computer: {SMALL} (llama.cpp)."
    try_button.click()
    assert first_run.tried == [SMALL]
    assert not dialog.isVisible()
    assert welcome_shown(first_run.preferences)


async def test_a_failed_pull_says_why_and_offers_another_try(first_run: FirstRun) -> None:
    connection = first_run.connection
    dialog = await open_dialog(first_run, [engine("llamacpp", "stopped")])
    box = dialog.first_model
    await wait_until(lambda: box.pull_button.isVisibleTo(dialog), 5, "the offer")
    connection.script(methods.ENGINE_ACTION, InternalError("cannot reach huggingface.co"))
    box.pull_button.click()
    await wait_until(lambda: box.pull_button.text() == "Try again", 5, "the failure")
    assert box.status.text() == "Could not get it: cannot reach huggingface.co"
    assert box.pull_button.isVisibleTo(dialog) and not dialog.try_box.try_button.isEnabled()


async def test_a_model_already_here_skips_to_trying_it(first_run: FirstRun) -> None:
    have = listed("ollama", "qwen3:8b", "llama3.2:1b")
    dialog = await open_dialog(first_run, ENGINES, models=have)
    box = dialog.first_model
    await wait_until(dialog.try_box.try_button.isEnabled, 5, "the model found")
    assert (
        box.status.text()
        == "This computer already has a model: llama3.2:1b (Ollama). Try it below."
    )
    assert box.pull_button.isHidden() and box.heading.isHidden()
    dialog.try_box.try_button.click()
    assert first_run.tried == ["llama3.2:1b"]


async def test_without_an_engine_for_it_the_step_says_what_to_do_first(
    first_run: FirstRun,
) -> None:
    dialog = await open_dialog(
        first_run, [engine("llamacpp", "not-installed"), engine("ollama", "stopped")]
    )
    box = dialog.first_model
    await settle()
    assert first_run.welcome.first_model.state.phase == "no_engine"
    assert box.pull_button.isHidden() and box.offer.text().startswith("Install llama.cpp")
    assert not dialog.try_box.try_button.isEnabled()


def test_an_empty_catalogue_offers_nothing(qapp: QApplication) -> None:
    connection = FakeConnection()
    stores = Stores.build(connection)
    models = ModelsController(connection, PendingActions(), stores.engines, stores.discovery)
    activity = ActivityController(connection, ErrorsModel(), stores.jobs, stores.engines)
    controller = FirstModelController(models, NodesModel(), activity, Catalog())
    assert controller.state.phase == "no_engine" and controller.state.model is None


def test_pull_waits_until_the_broker_can_take_it() -> None:
    statuses = {
        status.engine: status
        for status in [msgspec.convert(engine("llamacpp", "stopped"), EngineStatus)]
    }
    offline = first_model_state(Here(statuses, None, connected=False), CATALOG.entries)
    assert offline.phase == "offer" and not offline.can_pull
    online = first_model_state(Here(statuses, None, connected=True), CATALOG.entries)
    assert online.can_pull


async def test_the_playground_picks_the_model_it_is_given_once_it_is_listed(
    qtbot: QtBot,
) -> None:
    rig = await start_rig()
    try:
        page = PlaygroundPage(rig.playground, rig.check)
        qtbot.addWidget(page)
        combo = page.form.model_combo
        page.select_model("llama3.2:3b")
        assert combo.currentData() == "llama3.2:3b"
        page.select_model(SMALL)  # pulled a moment ago: not listed yet
        assert combo.currentData() == "llama3.2:3b"
        models = {**LOCAL_MODELS, "by_engine": {**LOCAL_MODELS["by_engine"], "llamacpp": [SMALL]}}
        events = EngineEvents(rig.connection)
        events.models(models)
        await wait_until(lambda: combo.currentData() == SMALL, 5, "the new model picked")
        combo.setCurrentIndex(combo.findData("qwen3:8b"))
        events.models(LOCAL_MODELS)
        await wait_until(lambda: combo.findData(SMALL) < 0, 5, "the list refilled")
        assert combo.currentData() == "qwen3:8b"  # a later pick is the user's own
    finally:
        await rig.close()


async def test_the_offer_fits_this_computers_memory(first_run: FirstRun) -> None:
    this_computer = {
        "node_id": "n1", "name": "pc", "kind": "pair", "sources": ["self"], "addresses": [],
        "ports": {}, "engines": {}, "reachable": True,
        "telemetry": {"valid": True, "memory_total_bytes": 16 * GB},
    }  # fmt: skip
    first_run.nodes.upsert(msgspec.convert(this_computer, DiscoveredNode))
    dialog = await open_dialog(first_run, [engine("llamacpp", "stopped")])
    box = dialog.first_model
    await wait_until(lambda: box.pull_button.isVisibleTo(dialog), 5, "the offer")
    assert box.heading.text() == "<b>Qwen2.5 1.5B Instruct</b> · 1.1 GB"
    assert box.offer.text().startswith("A small chat model that fits this computer's 16 GB of RAM")


async def test_a_failed_load_says_why_and_try_again_loads_without_a_new_download(
    first_run: FirstRun,
) -> None:
    connection, events = first_run.connection, first_run.engines
    dialog = await open_dialog(first_run, [engine("llamacpp", "stopped")])
    box = dialog.first_model
    await wait_until(lambda: box.pull_button.isVisibleTo(dialog), 5, "the offer")
    connection.script(methods.ENGINE_ACTION, {"ok": True}, InternalError("llama-server exited"))
    box.pull_button.click()
    events.models(listed("llamacpp", SMALL))
    await wait_until(lambda: box.pull_button.text() == "Try again", 5, "the failed load")
    assert "llama-server exited" in box.status.text()
    connection.script(methods.ENGINE_ACTION, {"ok": True})
    box.pull_button.click()
    await wait_until(lambda: len(connection.called(methods.ENGINE_ACTION)) == 3, 5, "a retry")
    actions = [params["action"] for params in connection.called(methods.ENGINE_ACTION)]
    assert actions == ["pull_model", "load_model", "load_model"]
    events.models(listed("llamacpp", SMALL, loaded=(SMALL,)))
    await wait_until(dialog.try_box.try_button.isEnabled, 5, "the model to be ready")
