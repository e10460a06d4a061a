"""Error banners: every action the broker attaches (retry, restart, open settings) and Dismiss
reach the broker from a click; other members' errors carry their name and node."""

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
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.banners import MAX_BANNERS, Banner, ErrorBanners
from backend.protocol import methods
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until


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


# Other members' errors.

SELF, LAPTOP, GPU = "n1", "n-laptop", "n-gpu"


def member_error(node: str, error_id: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": error_id, "node_id": node, "message": message, "severity": "error",
        "created_at": 1.0, "updated_at": 1.0, **extra,
    }  # fmt: skip


@pytest.fixture
async def cluster_ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    """Banners whose controller knows the members (engines store) and this node (discovery)."""
    connection = FakeConnection()
    store = ComponentsStore(connection)
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    components = ComponentsController(connection, ComponentsModel(), store)
    errors = ErrorsController(
        connection, ErrorsModel(), components, engines=engines, discovery=discovery
    )
    banners = ErrorBanners(errors.model, errors)
    qtbot.addWidget(banners)
    members = [
        {"node_id": LAPTOP, "name": "laptop", "reachable": True},
        {"node_id": GPU, "name": "gpu-box", "reachable": False},
    ]
    connection.script(methods.ENGINE_SUBSCRIBE, EngineEvents(connection).snapshot(members=members))
    here = {
        "node_id": SELF, "name": "desk", "kind": "pair", "sources": ["self"], "addresses": [],
        "ports": {}, "engines": {}, "reachable": True,
    }  # fmt: skip
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [here]})
    connection.script(methods.ERRORS_GET_INITIAL, [])
    connection.become_ready()
    await wait_until(lambda: engines.loaded and discovery.loaded)
    yield Ui(connection, errors, banners)
    for closing in (errors, components, store, engines, discovery):
        await closing.close()
    await connection.stop()


async def test_a_members_error_names_it_and_dismissing_sends_its_node(cluster_ui: Ui) -> None:
    ui = cluster_ui
    retry = {"kind": "retry", "label": "Try again", "target": "ollama"}
    restart = {"kind": "restart-component", "label": "Restart now", "target": "proxy"}
    ui.connection.push(methods.ERRORS_UPDATE, [
        member_error(LAPTOP, "engine:crashed:ollama", "Ollama crashed", action=retry),
        member_error(LAPTOP, "supervisor:crashed:proxy", "proxy crashed", action=restart),
        member_error(SELF, "store:corrupt", "the store is damaged"),
    ])  # fmt: skip
    messages = [banner.message.text() for banner in ui.banners.banners]
    assert messages == [
        "the store is damaged", "laptop: Ollama crashed", "laptop: proxy crashed"]  # fmt: skip
    crashed, proxy = ui.banners.banners[1:]
    assert "Restart now" not in buttons(proxy)  # it would restart this computer's proxy
    buttons(crashed)["Try again"].click()
    await settle()
    assert ui.connection.called(methods.ENGINE_START) == [{"engine": "ollama", "node": LAPTOP}]
    buttons(crashed)["Dismiss"].click()
    await settle()
    assert ui.connection.called(methods.ERRORS_CLEAR) == [
        {"id": "engine:crashed:ollama", "node_id": LAPTOP}
    ]
    ui.connection.push(methods.ERRORS_UPDATE, [member_error(SELF, "store:corrupt", "x")])
    assert [banner.message.text() for banner in ui.banners.banners] == ["x"]


async def test_an_unreachable_member_is_one_line(cluster_ui: Ui) -> None:
    ui = cluster_ui
    away = "gpu-box cannot be reached (connection refused). PAIR keeps trying; its engines and "
    ui.connection.push(methods.ERRORS_UPDATE, [
        member_error(GPU, "engine:crashed:ollama", "Ollama crashed"),  # as last heard
        member_error(GPU, "cluster:unreachable", away + "jobs show as they were last seen.",
                     severity="warning"),
    ])  # fmt: skip
    assert len(ui.banners.banners) == 1
    banner = ui.banners.banners[0]
    assert banner.message.text().startswith("gpu-box cannot be reached (connection refused).")
    assert banner.title.text() == "<b>Warning</b>"
    buttons(banner)["Dismiss"].click()
    await settle()
    assert ui.connection.called(methods.ERRORS_CLEAR) == [
        {"id": "cluster:unreachable", "node_id": GPU}
    ]


async def test_a_member_renamed_renames_its_banner(cluster_ui: Ui) -> None:
    ui = cluster_ui
    ui.connection.push(methods.ERRORS_UPDATE, [member_error(LAPTOP, "x", "disk full")])
    assert ui.banners.banners[0].message.text() == "laptop: disk full"
    events = EngineEvents(ui.connection, seq=1)
    events.member({"node_id": LAPTOP, "name": "old-laptop", "reachable": True})
    assert ui.banners.banners[0].message.text() == "old-laptop: disk full"
    before = ui.banners.banners[0]
    events.member({"node_id": LAPTOP, "name": "old-laptop", "reachable": True, "pulls": []})
    assert ui.banners.banners[0] is before  # nothing to rename: the banner stays


MANUAL = (
    "The manual node 127.0.0.1:58815 has not answered 3 probes in a row "
    "(https://127.0.0.1:58815/v1/node-info: Cannot connect to host 127.0.0.1:58815 "
    "ssl:<ssl.SSLContext object at 0x{}> [Connect call failed])."
)


async def test_one_problem_reported_by_three_members_is_one_banner(cluster_ui: Ui) -> None:
    ui = cluster_ui
    ui.connection.push(methods.ERRORS_UPDATE, [
        member_error(node, "discovery:manual:127.0.0.1:58815", MANUAL.format(address),
                     severity="warning")
        for node, address in ((SELF, "7fed1df7e330"), (LAPTOP, "7f00aa"), (GPU, "7f11bb"))
    ])  # fmt: skip
    assert len(ui.banners.banners) == 1
    text = ui.banners.banners[0].message.text()
    assert text.startswith("This computer, laptop and gpu-box: The manual node 127.0.0.1:58815")
    assert "object at 0x" not in text and "ssl:" not in text
    buttons(ui.banners.banners[0])["Dismiss"].click()
    await settle()
    cleared = ui.connection.called(methods.ERRORS_CLEAR)
    assert sorted(clear["node_id"] for clear in cleared) == sorted([SELF, LAPTOP, GPU])


async def test_past_the_limit_a_line_counts_the_rest(ui: Ui) -> None:
    ui.connection.push(methods.ERRORS_UPDATE, [error(f"e{i}", None) for i in range(7)])
    assert len(ui.banners.banners) == MAX_BANNERS
    assert ui.banners.more_label is not None
    assert ui.banners.more_label.text() == f"+{7 - MAX_BANNERS} more"
    assert "e6 went wrong" in ui.banners.more_label.toolTip()
    ui.connection.push(methods.ERRORS_UPDATE, [])
    assert ui.banners.isHidden() and ui.banners.more_label is None
