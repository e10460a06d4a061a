"""The endpoints window: real URLs, Copy, moved-port notes and curl examples from a scripted
connection; the pure builders behind it."""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.broker.state import ServiceState
from app.controllers.endpoints import (
    DOOR_KINDS,
    MODEL_PLACEHOLDER,
    EndpointsController,
    build_endpoints,
    curl_example,
    moved_notes,
)
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.endpoints_window import NO_DOORS, NOT_CONNECTED, EndpointsWindow
from backend.protocol import methods
from backend.protocol.errors import Unavailable
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.engines import EngineModels
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until

DOORS = {
    "llamacpp": "http://127.0.0.1:8080",
    "ollama": "http://127.0.0.1:11434",
    "openai": "http://127.0.0.1:41873",
}
MOVED_MESSAGE = (
    "Port 1234 for the openai front door is used by another program; PAIR serves this door on "
    "http://127.0.0.1:41873 instead."
)


def service_error(error_id: str, message: str, severity: str = "warning") -> dict[str, Any]:
    return {
        "id": error_id, "node_id": "n1", "message": message, "severity": severity,
        "created_at": 1.0, "updated_at": 1.0,
    }  # fmt: skip


MOVED = service_error("proxy:port-taken:openai", MOVED_MESSAGE)


def status(front_doors: dict[str, str], errors: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "0.1.0", "pid": 4242, "started_at": 1.0, "uptime_ms": 10, "data_dir": "/d",
        "node_id": "n1", "node_name": "pc", "control_address": "/c", "log_file": None,
        "ports": {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080},
        "components": [], "errors": errors, "front_doors": front_doors,
    }  # fmt: skip


def models(**by_engine: list[str]) -> dict[str, Any]:
    names = [name for names in by_engine.values() for name in names]
    return {"models": names, "by_engine": by_engine, "loaded_by_engine": {}, "slots_by_engine": {}}


def run_curl_body(example: str) -> tuple[str, dict[str, Any]]:
    """The URL and the JSON body a POSIX shell would pass to curl."""
    argv = shlex.split(example.replace(" \\\n", " "))
    assert argv[0] == "curl"
    return argv[1], json.loads(argv[argv.index("-d") + 1])


# Pure builders.


def test_doors_come_in_a_fixed_order_with_client_settings() -> None:
    endpoints = build_endpoints(DOORS, [], None)
    assert [e.door for e in endpoints] == ["ollama", "openai", "llamacpp"]
    assert endpoints[0].client_setting == "OLLAMA_HOST=127.0.0.1:11434"
    assert endpoints[1].client_setting == "OPENAI_BASE_URL=http://127.0.0.1:41873/v1"
    assert all(e.moved_note is None and e.model is None for e in endpoints)


def test_moved_notes_come_from_port_taken_errors_only() -> None:
    errors = [
        ServiceError(id="proxy:port-taken:openai", node_id="n", message="moved", created_at=1,
                     updated_at=1),
        ServiceError(id="supervisor:crashed:proxy", node_id="n", message="x", created_at=1,
                     updated_at=1),
    ]  # fmt: skip
    assert moved_notes(errors) == {"openai": "moved"}
    endpoints = build_endpoints(DOORS, errors, None)
    assert [e.moved_note for e in endpoints] == [None, "moved", None]


def test_example_model_prefers_a_loaded_one() -> None:
    listed = EngineModels(
        models=["a", "b", "q"],
        by_engine={"ollama": ["a", "b"], "lmstudio": ["q"]},
        loaded_by_engine={"ollama": ["b"]},
        slots_by_engine={},
    )
    endpoints = build_endpoints(DOORS, [], listed)
    assert [e.model for e in endpoints] == ["b", "q", None]


@pytest.mark.parametrize("kind", DOOR_KINDS, ids=lambda kind: kind.door)
def test_curl_examples_are_valid_shell_and_json(kind: Any) -> None:
    example = curl_example(kind, "http://127.0.0.1:9", 'it\'s "odd"')
    url, body = run_curl_body(example)
    assert url == f"http://127.0.0.1:9{kind.chat_path}"
    assert body["model"] == 'it\'s "odd"'
    assert body["messages"] == [{"role": "user", "content": "Hello!"}]
    assert ("stream" in body) is (kind.door == "ollama")
    assert ("Content-Type: application/json" in example) is kind.openai
    _, body = run_curl_body(curl_example(kind, "http://127.0.0.1:9", None))
    assert body["model"] == MODEL_PLACEHOLDER


# The window against a scripted connection.


@pytest.fixture
async def window(qtbot: QtBot, connection: FakeConnection) -> AsyncIterator[EndpointsWindow]:
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    controller = EndpointsController(connection, engines, settings)
    shown = EndpointsWindow(controller)
    qtbot.addWidget(shown)
    yield shown
    await controller.close()
    await engines.close()
    await settings.close()


async def test_each_door_shows_its_real_url_and_copy_puts_it_on_the_clipboard(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, [MOVED]))
    EngineEvents(connection).script(models=models(ollama=["llama3.2:3b"]))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three doors")
    await wait_until(lambda: window.cards["ollama"].copy_example.text_to_copy.count("llama3.2"))
    assert window.empty_note.isHidden()
    for door, url in DOORS.items():
        card = window.cards[door]
        assert card.url.text() == url
        card.copy_url.click()
        assert QGuiApplication.clipboard().text() == url
        assert card.copy_url.text() == "Copied"
    ollama = window.cards["ollama"]
    ollama.copy_example.click()
    copied = QGuiApplication.clipboard().text()
    assert copied == ollama.example.text()
    assert run_curl_body(copied) == (
        "http://127.0.0.1:11434/api/chat",
        {"model": "llama3.2:3b", "messages": [{"role": "user", "content": "Hello!"}],
         "stream": False},
    )  # fmt: skip
    url, body = run_curl_body(window.cards["openai"].example.text())
    assert url == "http://127.0.0.1:41873/v1/chat/completions"
    assert body["model"] == MODEL_PLACEHOLDER
    assert "no model known yet" in window.cards["openai"].setting.text()


async def test_a_moved_port_shows_the_brokers_note_on_that_door(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, []))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three doors")
    assert all(card.note.isHidden() for card in window.cards.values())
    # The door moves (the proxy restarted while another program held 1234).
    moved_doors = {**DOORS, "openai": "http://127.0.0.1:41999"}
    message = MOVED_MESSAGE.replace("41873", "41999")
    connection.script(methods.STATUS, status(moved_doors, [MOVED | {"message": message}]))
    connection.push(methods.ERRORS_UPDATE, [MOVED | {"message": message}])
    card = window.cards["openai"]
    assert not card.note.isHidden()
    assert card.note.message.text() == message
    await wait_until(lambda: card.url.text() == "http://127.0.0.1:41999", 5, "the new URL")
    assert [call for call, _ in connection.calls].count(methods.STATUS.name) == 2
    assert window.cards["ollama"].note.isHidden()
    connection.push(methods.ERRORS_UPDATE, [])
    assert card.note.isHidden()


async def test_models_changed_updates_the_example(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    events = EngineEvents(connection, seq=3)
    connection.script(methods.STATUS, status(DOORS, []))
    events.script()  # no engine has listed its models yet
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three doors")
    await settle()
    events.models(models(lmstudio=["qwen2.5-7b-instruct"]))
    _, body = run_curl_body(window.cards["openai"].example.text())
    assert body["model"] == "qwen2.5-7b-instruct"


async def test_a_failed_engines_subscribe_leaves_placeholders(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, []))
    connection.script(methods.ENGINE_SUBSCRIBE, Unavailable("engines are starting"))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three doors")
    await settle()
    _, body = run_curl_body(window.cards["ollama"].example.text())
    assert body["model"] == MODEL_PLACEHOLDER


async def test_without_a_service_the_window_says_why_it_is_empty(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    assert window.empty_note.text() == NOT_CONNECTED
    connection.script(methods.STATUS, status({}, []))
    connection.become_ready()
    await wait_until(lambda: window.empty_note.text() == NO_DOORS, 5, "no doors yet")
    connection.script(methods.STATUS, status(DOORS, []))
    window.show_and_raise()  # showing the window reads the doors again
    await wait_until(lambda: len(window.cards) == 3, 5, "three doors")
    connection.lose_session(ServiceState.DISCONNECTED)
    await settle()
    assert window.cards == {}
    assert window.empty_note.text() == NOT_CONNECTED
    assert not window.empty_note.isHidden()
