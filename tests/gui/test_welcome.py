"""First run: the welcome dialog appears once, finds engines, starts or installs them, and says
where apps connect."""

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

from app.controllers.activity import ActivityController
from app.controllers.endpoints import EndpointsController
from app.models.errors import ErrorsModel
from app.stores.settings import SettingsStore
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
from tests.gui.helpers import EngineEvents, FakeConnection, Stores, settle, wait_until

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
    welcome = Welcome(connection, activity, endpoints, preferences)
    events = EngineEvents(connection)
    yield FirstRun(connection, activity, endpoints, preferences, welcome, events)
    if welcome.dialog is not None:
        welcome.dialog.close()
        welcome.dialog.deleteLater()
    for controller in (activity, endpoints):
        await controller.close()
    await stores.close()
    await settings.close()
    await connection.stop()
    qapp.setQuitOnLastWindowClosed(quit_on_close)


def script_session(connection: FakeConnection, engines: list[dict[str, Any]]) -> None:
    for _ in range(3):
        connection.script(methods.STATUS, status(DOORS))
        EngineEvents(connection).script(*engines)
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
        first_run.connection, first_run.activity, first_run.endpoints, first_run.preferences
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
    dialog = WelcomeDialog(first_run.activity, first_run.endpoints, demo=True)
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
