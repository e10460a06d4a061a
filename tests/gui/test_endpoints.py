"""The endpoints window: one card per client API (every door reaches every model of the
cluster), the doors' real URLs, Copy, moved-port notes and curl examples from a scripted
connection; the pure builders behind it."""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.broker.state import ServiceState
from app.controllers.endpoint_texts import node_api_urls
from app.controllers.endpoints import (
    API_KINDS,
    MODEL_PLACEHOLDER,
    EndpointsController,
    build_doors,
    build_endpoints,
    curl_example,
    example_model,
    moved_notes,
)
from app.lan_addresses import lan_addresses
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.endpoints_window import NO_DOORS, NOT_CONNECTED, WINDOW_TITLE, EndpointsWindow
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

LLAMACPP_LISTING = EngineModels(
    models=["gpu-model"], by_engine={"llamacpp": ["gpu-model"]}, loaded_by_engine={},
    slots_by_engine={},
)  # fmt: skip


def test_doors_come_in_a_fixed_order_and_each_api_has_its_client_setting() -> None:
    assert [d.door for d in build_doors(DOORS, [])] == ["ollama", "openai", "llamacpp"]
    endpoints = build_endpoints(DOORS, None)
    assert [e.api for e in endpoints] == ["ollama", "openai", "anthropic"]
    assert [e.client_setting for e in endpoints] == [
        "OLLAMA_HOST=127.0.0.1:11434",
        "OPENAI_BASE_URL=http://127.0.0.1:41873/v1",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:11434",  # the SDK adds /v1/messages itself
    ]
    assert [e.url for e in endpoints] == [
        "http://127.0.0.1:11434", "http://127.0.0.1:41873/v1", "http://127.0.0.1:11434"
    ]  # fmt: skip
    assert all(e.model is None for e in endpoints)
    assert all(d.moved_note is None for d in build_doors(DOORS, []))


def test_every_api_names_another_open_door_when_its_own_is_closed() -> None:
    only_llamacpp = {"llamacpp": "http://127.0.0.1:8080"}
    assert [e.client_setting for e in build_endpoints(only_llamacpp, None)] == [
        "OLLAMA_HOST=127.0.0.1:8080",
        "OPENAI_BASE_URL=http://127.0.0.1:8080/v1",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8080",
    ]
    without_openai = {"ollama": DOORS["ollama"], "llamacpp": DOORS["llamacpp"]}
    openai = build_endpoints(without_openai, None)[1]
    assert openai.client_setting == "OPENAI_BASE_URL=http://127.0.0.1:8080/v1"
    assert build_endpoints({}, None) == []


def test_moved_notes_come_from_port_taken_errors_only() -> None:
    errors = [
        ServiceError(id="proxy:port-taken:openai", node_id="n", message="moved", created_at=1,
                     updated_at=1),
        ServiceError(id="supervisor:crashed:proxy", node_id="n", message="x", created_at=1,
                     updated_at=1),
    ]  # fmt: skip
    assert moved_notes(errors) == {"openai": "moved"}
    doors = build_doors(DOORS, errors)
    assert [d.moved_note for d in doors] == [None, "moved", None]
    assert [d.usual_port_of for d in doors] == ["Ollama", "LM Studio", "llama-server"]


def test_the_example_model_is_any_model_of_the_cluster_a_loaded_one_first() -> None:
    listed = EngineModels(
        models=["a", "b", "q"],
        by_engine={"ollama": ["a", "b"], "lmstudio": ["q"]},
        loaded_by_engine={"ollama": ["b"]},
        slots_by_engine={},
    )
    assert example_model([listed]) == "b"
    assert example_model([None, LLAMACPP_LISTING]) == "gpu-model"  # another member's only
    loaded_elsewhere = msgspec.structs.replace(
        LLAMACPP_LISTING, loaded_by_engine={"llamacpp": ["gpu-model"]}
    )
    assert example_model([listed, loaded_elsewhere]) == "b"
    assert example_model([msgspec.structs.replace(listed, loaded_by_engine={}),
                          loaded_elsewhere]) == "gpu-model"  # fmt: skip
    assert example_model([None]) is None
    # Every API's example names it, whatever engine serves it.
    endpoints = build_endpoints(DOORS, "a")
    assert [run_curl_body(e.example)[1]["model"] for e in endpoints] == ["a", "a", "a"]


@pytest.mark.parametrize("kind", API_KINDS, ids=lambda kind: kind.api)
def test_curl_examples_are_valid_shell_and_json(kind: Any) -> None:
    example = curl_example(kind, "http://127.0.0.1:9", 'it\'s "odd"')
    url, body = run_curl_body(example)
    assert url == f"http://127.0.0.1:9{kind.chat_path}"
    assert body["model"] == 'it\'s "odd"'
    assert body["messages"] == [{"role": "user", "content": "Hello!"}]
    assert ("stream" in body) is (kind.api == "ollama")
    assert ("Content-Type: application/json" in example) is (kind.api != "ollama")
    _, body = run_curl_body(curl_example(kind, "http://127.0.0.1:9", None))
    assert body["model"] == MODEL_PLACEHOLDER


def test_the_anthropic_example_carries_what_the_messages_api_requires() -> None:
    example = curl_example(API_KINDS[2], "http://127.0.0.1:9", "m")
    url, body = run_curl_body(example)
    assert url == "http://127.0.0.1:9/v1/messages"
    assert "anthropic-version: 2023-06-01" in shlex.split(example.replace(" \\\n", " "))
    assert body["max_tokens"] > 0


# The window against a scripted connection.

INTERFACES = ["10.0.0.7", "fe80::1%eth0", "fd00::2"]


@pytest.fixture
async def window(qtbot: QtBot, connection: FakeConnection) -> AsyncIterator[EndpointsWindow]:
    engines, settings = EnginesStore(connection), SettingsStore(connection)
    discovery = DiscoveryStore(connection)
    controller = EndpointsController(
        connection, engines, settings, discovery=discovery, interfaces=lambda: INTERFACES
    )
    shown = EndpointsWindow(controller)
    qtbot.addWidget(shown)
    yield shown
    await controller.close()
    await engines.close()
    await discovery.close()
    await settings.close()


async def test_each_door_and_api_shows_its_real_url_and_copy_puts_it_on_the_clipboard(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, [MOVED]))
    EngineEvents(connection).script(models=models(ollama=["llama3.2:3b"]))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3 and len(window.doors) == 3, 5, "the doors")
    await wait_until(lambda: window.cards["ollama"].copy_example.text_to_copy.count("llama3.2"))
    assert window.empty_note.isHidden() and not window.ports.isHidden()
    for door, url in DOORS.items():
        row = window.doors[door]
        assert row.url.text() == url
        row.copy_url.click()
        assert QGuiApplication.clipboard().text() == url
        assert row.copy_url.text() == "Copied"
    addresses = {"ollama": DOORS["ollama"], "openai": DOORS["openai"] + "/v1",
                 "anthropic": DOORS["ollama"]}  # fmt: skip
    for api, url in addresses.items():
        window.cards[api].copy_url.click()
        assert QGuiApplication.clipboard().text() == url
    ollama = window.cards["ollama"]
    ollama.copy_example.click()
    copied = QGuiApplication.clipboard().text()
    assert copied == ollama.example.text()
    assert run_curl_body(copied) == (
        "http://127.0.0.1:11434/api/chat",
        {"model": "llama3.2:3b", "messages": [{"role": "user", "content": "Hello!"}],
         "stream": False},
    )  # fmt: skip
    # An Ollama model through the OpenAI and Anthropic APIs: every door reaches every model.
    url, body = run_curl_body(window.cards["openai"].example.text())
    assert (url, body["model"]) == ("http://127.0.0.1:41873/v1/chat/completions", "llama3.2:3b")
    anthropic = window.cards["anthropic"]
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:11434" in anthropic.setting.text()
    url, body = run_curl_body(anthropic.example.text())
    assert (url, body["model"]) == ("http://127.0.0.1:11434/v1/messages", "llama3.2:3b")
    assert all("no model known yet" not in card.model_note.text() for card in window.cards.values())


async def test_a_moved_port_shows_the_brokers_note_on_that_door(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, []))
    connection.become_ready()
    await wait_until(lambda: len(window.doors) == 3, 5, "three doors")
    assert all(row.note.isHidden() for row in window.doors.values())
    # The door moves (the proxy restarted while another program held 1234).
    moved_doors = {**DOORS, "openai": "http://127.0.0.1:41999"}
    message = MOVED_MESSAGE.replace("41873", "41999")
    connection.script(methods.STATUS, status(moved_doors, [MOVED | {"message": message}]))
    connection.push(methods.ERRORS_UPDATE, [MOVED | {"message": message}])
    row = window.doors["openai"]
    assert not row.note.isHidden()
    assert row.note.message.text() == message
    await wait_until(lambda: row.url.text() == "http://127.0.0.1:41999", 5, "the new URL")
    assert window.cards["openai"].url.text() == "http://127.0.0.1:41999/v1"
    assert [call for call, _ in connection.calls].count(methods.STATUS.name) == 2
    assert window.doors["ollama"].note.isHidden()
    connection.push(methods.ERRORS_UPDATE, [])
    assert row.note.isHidden()


async def test_models_changed_updates_every_example(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    events = EngineEvents(connection, seq=3)
    connection.script(methods.STATUS, status(DOORS, []))
    events.script()  # no engine has listed its models yet
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three APIs")
    await settle()
    events.models(models(lmstudio=["qwen2.5-7b-instruct"]))
    for card in window.cards.values():
        _, body = run_curl_body(card.example.text())
        assert body["model"] == "qwen2.5-7b-instruct"


async def test_another_members_model_is_the_example_when_this_computer_has_none(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    events = EngineEvents(connection, seq=3)
    connection.script(methods.STATUS, status(DOORS, []))
    events.script()
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three APIs")
    await settle()
    gpu_box = {"node_id": "n2", "name": "gpu-box", "reachable": True,
               "models": models(llamacpp=["qwen3-8b-q4"])}  # fmt: skip
    events.member(gpu_box)
    _, body = run_curl_body(window.cards["ollama"].example.text())
    assert body["model"] == "qwen3-8b-q4"
    events.member(gpu_box | {"reachable": False})
    _, body = run_curl_body(window.cards["ollama"].example.text())
    assert body["model"] == MODEL_PLACEHOLDER


async def test_a_failed_engines_subscribe_leaves_placeholders(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    connection.script(methods.STATUS, status(DOORS, []))
    connection.script(methods.ENGINE_SUBSCRIBE, Unavailable("engines are starting"))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three APIs")
    await settle()
    for card in window.cards.values():
        _, body = run_curl_body(card.example.text())
        assert body["model"] == MODEL_PLACEHOLDER
        assert "no model known yet" in card.model_note.text()


async def test_without_a_service_the_window_says_why_it_is_empty(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    assert window.empty_note.text() == NOT_CONNECTED
    connection.script(methods.STATUS, status({}, []))
    connection.become_ready()
    await wait_until(lambda: window.empty_note.text() == NO_DOORS, 5, "no doors yet")
    connection.script(methods.STATUS, status(DOORS, []))
    assert window.ports.isHidden()
    window.show_and_raise()  # showing the window reads the doors again
    await wait_until(lambda: len(window.cards) == 3, 5, "three APIs")
    connection.lose_session(ServiceState.DISCONNECTED)
    await settle()
    assert window.cards == {} and window.doors == {}
    assert window.ports.isHidden()
    assert window.empty_note.text() == NOT_CONNECTED
    assert not window.empty_note.isHidden()


def test_every_sdk_gets_the_settings_it_needs_a_key_included() -> None:
    settings = {e.api: e.client_settings for e in build_endpoints(DOORS, None)}
    assert settings == {
        "ollama": ("OLLAMA_HOST=127.0.0.1:11434",),
        "openai": ("OPENAI_BASE_URL=http://127.0.0.1:41873/v1", "OPENAI_API_KEY=pair"),
        "anthropic": ("ANTHROPIC_BASE_URL=http://127.0.0.1:11434", "ANTHROPIC_API_KEY=pair"),
    }


def test_the_node_api_is_https_on_every_usable_address() -> None:
    assert node_api_urls(["192.168.1.5", "fd00::2"], 14320) == [
        "https://192.168.1.5:14320", "https://[fd00::2]:14320"]  # fmt: skip
    assert lan_addresses(["127.0.0.1", "192.168.1.5"], ["fe80::1", "10.0.0.7", "192.168.1.5"]) == [
        "192.168.1.5", "10.0.0.7"]  # fmt: skip


async def test_the_window_shows_the_node_api_and_every_client_setting(
    connection: FakeConnection, window: EndpointsWindow
) -> None:
    here = {
        "node_id": "n1", "name": "pc", "kind": "pair", "sources": ["self"],
        "addresses": ["127.0.0.1", "192.168.1.5"], "ports": {}, "engines": {}, "reachable": True,
    }  # fmt: skip
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [here]})
    connection.script(methods.STATUS, status(DOORS, []))
    connection.become_ready()
    await wait_until(lambda: len(window.cards) == 3, 5, "three APIs")
    await wait_until(lambda: "192.168.1.5" in window.node_api_urls.text(), 5, "the node API")
    assert window.node_api_urls.text().splitlines() == [
        "https://192.168.1.5:14320",
        "https://10.0.0.7:14320",
        "https://[fd00::2]:14320",
    ]
    openai = window.cards["openai"]
    assert "OPENAI_API_KEY=pair" in openai.setting.text().splitlines()
    openai.copy_setting.click()
    assert QGuiApplication.clipboard().text() == openai.setting.text()
    assert "ANTHROPIC_API_KEY=pair" in window.cards["anthropic"].setting.text()
    assert not window.key_note.isHidden()


def test_the_title_leaves_the_app_name_to_the_desktop(window: EndpointsWindow) -> None:
    # The desktop appends " — PAIR" (the application's display name) to every title.
    assert window.windowTitle() == WINDOW_TITLE == "API endpoints"
