"""Error banners: every action the broker attaches (retry, restart, open settings) and Dismiss
reach the broker from a click."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from app.controllers.components import ComponentsController
from app.controllers.errors import ErrorsController
from app.models.components import ComponentsModel
from app.models.errors import ErrorsModel
from app.stores.components import ComponentsStore
from app.window.banners import Banner, ErrorBanners
from backend.protocol import methods
from tests.gui.helpers import FakeConnection, settle


def error(error_id: str, action: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": error_id, "node_id": "n1", "message": f"{error_id} went wrong", "severity": "error",
        "created_at": 1.0, "updated_at": 1.0, "action": action,
    }  # fmt: skip


@dataclass
class Ui:
    connection: FakeConnection
    errors: ErrorsController
    banners: ErrorBanners


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    connection = FakeConnection()
    store = ComponentsStore(connection)
    components = ComponentsController(connection, ComponentsModel(), store)
    errors = ErrorsController(connection, ErrorsModel(), components)
    banners = ErrorBanners(errors.model, errors)
    qtbot.addWidget(banners)
    yield Ui(connection, errors, banners)
    for controller in (errors, components, store):
        await controller.close()
    await connection.stop()


def buttons(banner: Banner) -> dict[str, QPushButton]:
    return {button.text(): button for button in banner.findChildren(QPushButton)}


async def test_retry_on_an_engine_error_starts_the_engine(ui: Ui) -> None:
    retry = {"kind": "retry", "label": "Try again", "target": "ollama"}
    ui.connection.push(methods.ERRORS_UPDATE, [error("engine:start-failed:ollama", retry)])
    banner = ui.banners.banners[0]
    assert banner.message.text() == "engine:start-failed:ollama went wrong"
    buttons(banner)["Try again"].click()
    await settle()
    assert (methods.ENGINE_START.name, {"engine": "ollama"}) in ui.connection.calls


async def test_dismiss_clears_the_entry_for_its_node(ui: Ui) -> None:
    ui.connection.push(methods.ERRORS_UPDATE, [error("store:corrupt", None)])
    buttons(ui.banners.banners[0])["Dismiss"].click()
    await settle()
    assert ui.connection.calls == [
        (methods.ERRORS_CLEAR.name, {"id": "store:corrupt", "node_id": "n1"})
    ]
    # The broker answers with a new snapshot without the entry: the banner goes.
    ui.connection.push(methods.ERRORS_UPDATE, [])
    assert ui.banners.banners == []
    assert ui.banners.isHidden()


async def test_restart_and_open_settings_actions(qtbot: QtBot, ui: Ui) -> None:
    restart = {"kind": "restart-component", "label": "Restart now", "target": "proxy"}
    settings = {"kind": "open-settings", "label": "Open settings"}
    ui.connection.push(
        methods.ERRORS_UPDATE,
        [error("supervisor:crashed:proxy", restart), error("x:settings", settings)],
    )
    first, second = ui.banners.banners
    buttons(first)["Restart now"].click()
    await settle()
    assert (methods.COMPONENTS_RESTART.name, {"name": "proxy"}) in ui.connection.calls
    with qtbot.waitSignal(ui.errors.open_settings_requested):
        buttons(second)["Open settings"].click()


async def test_a_dismiss_action_shows_one_dismiss_button(ui: Ui) -> None:
    dismiss = {"kind": "dismiss", "label": "OK"}
    ui.connection.push(methods.ERRORS_UPDATE, [error("note", dismiss)])
    assert list(buttons(ui.banners.banners[0])) == ["Dismiss"]
