"""The Cluster page's Network privacy box: the ``local_discovery`` and ``public_network``
switches save their settings, show the saved values, a public network turns the announce and
LAN access switches off, and a refused save goes back and says why; against a scripted
connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.controllers.cluster_page import ClusterPageController
from app.models.members import ApiKeysModel, MembersModel
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from app.window.cluster_page import ClusterPage
from app.window.network_privacy import lan_switch_shown
from backend.protocol import methods
from backend.protocol.errors import InvalidParams, Unavailable
from tests.gui.helpers import NO_MODELS, FakeConnection, emitted, settle, wait_until

KEYS = ("lan_access", "local_discovery", "public_network")
CLUSTER: dict[str, Any] = {
    "node_id": "n-self", "fingerprint": "sha256:" + "0" * 64, "key_protection": "keyring",
    "cluster_id": None, "cluster_name": "", "members": [], "invites": [],
}  # fmt: skip


def settings(**values: bool) -> dict[str, Any]:
    """A ``settings:get`` answer: the three switches' settings, off unless given."""
    schema = [{"key": key, "type": "bool", "default": False, "description": "d"} for key in KEYS]
    return {"values": {key: values.get(key, False) for key in KEYS}, "schema": schema}


@dataclass
class Ui:
    connection: FakeConnection
    controller: ClusterPageController
    page: ClusterPage


@pytest.fixture
async def ui(qtbot: QtBot) -> AsyncIterator[Ui]:
    connection = FakeConnection()
    stores = (ClusterStore(connection), EnginesStore(connection), DiscoveryStore(connection))
    settings_store = SettingsStore(connection)
    controller = ClusterPageController(
        connection, MembersModel(), ApiKeysModel(), *stores, settings_store
    )
    page = ClusterPage(connection, controller)
    qtbot.addWidget(page)
    yield Ui(connection, controller, page)
    for closing in (controller, *stores, settings_store):
        await closing.close()
    await connection.stop()


async def start(ui: Ui, **values: bool) -> None:
    """Script a session whose settings are ``values``, start it and wait for the settings."""
    connection = ui.connection
    connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": CLUSTER})
    connection.script(
        methods.ENGINE_SUBSCRIBE, {"seq": 1, "engines": [], "models": NO_MODELS, "members": []}
    )
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": []})
    connection.script(methods.SETTINGS_GET, settings(**values))
    connection.script(methods.APIKEYS_LIST, [])
    connection.become_ready()
    await wait_until(lambda: ui.controller.privacy.value("public_network") is not None, 5)
    await settle()


def test_a_public_network_shows_lan_access_off_whatever_was_saved() -> None:
    assert lan_switch_shown(True, public_network=True) == (False, False)
    assert lan_switch_shown(True, public_network=False) == (True, True)
    assert lan_switch_shown(None, public_network=False) == (False, False)


async def test_the_saved_values_show(ui: Ui) -> None:
    await start(ui, local_discovery=True)
    box = ui.page.privacy_box
    assert not box.isHidden()
    assert box.announce_switch.isChecked() and box.announce_switch.isEnabled()
    assert not box.public_switch.isChecked() and box.public_switch.isEnabled()
    assert box.announce_reason.isHidden()
    ui.connection.push(methods.SETTINGS_CHANGED, settings(local_discovery=False))
    await wait_until(lambda: not box.announce_switch.isChecked(), 5)
    assert ui.connection.called(methods.SETTINGS_SET) == []  # a push is not saved back


async def test_the_announce_switch_saves_local_discovery(ui: Ui) -> None:
    await start(ui, local_discovery=False)
    switch = ui.page.privacy_box.announce_switch
    ui.connection.script(methods.SETTINGS_SET, settings(local_discovery=True))
    await emitted(ui.controller.privacy.changed, switch.click)
    assert ui.connection.called(methods.SETTINGS_SET) == [{"values": {"local_discovery": True}}]
    assert switch.isChecked()


async def test_a_public_network_turns_the_announce_and_lan_switches_off(ui: Ui) -> None:
    await start(ui, lan_access=True, local_discovery=True)
    box, lan = ui.page.privacy_box, ui.page.lan_box
    assert lan.switch.isChecked() and lan.switch.isEnabled() and lan.public_reason.isHidden()
    ui.connection.script(methods.SETTINGS_SET, settings(lan_access=True, public_network=True))
    await emitted(ui.controller.privacy.changed, box.public_switch.click)
    await settle()
    assert ui.connection.called(methods.SETTINGS_SET) == [{"values": {"public_network": True}}]
    assert box.public_switch.isChecked()
    for switch in (box.announce_switch, lan.switch):
        assert not switch.isChecked() and not switch.isEnabled()
    assert not box.announce_reason.isHidden() and not lan.public_reason.isHidden()
    ui.connection.push(methods.SETTINGS_CHANGED, settings(lan_access=True, local_discovery=True))
    await wait_until(lambda: lan.switch.isChecked() and box.announce_switch.isEnabled(), 5)
    assert lan.switch.isEnabled() and box.announce_switch.isChecked()
    assert box.announce_reason.isHidden() and lan.public_reason.isHidden()


async def test_a_refused_save_goes_back_and_says_why(ui: Ui) -> None:
    await start(ui, local_discovery=True)
    box = ui.page.privacy_box
    ui.connection.script(methods.SETTINGS_SET, InvalidParams("settings are read-only here"))
    key, _message = await emitted(ui.controller.privacy.save_failed, box.public_switch.click)
    await settle()
    assert key == "public_network"
    assert not box.public_switch.isChecked() and box.announce_switch.isChecked()
    error = box.errors["public_network"]
    assert not error.isHidden() and "settings are read-only here" in error.text()
    assert box.errors["local_discovery"].isHidden()


async def test_a_new_key_on_a_public_network_says_lan_access_is_off(ui: Ui) -> None:
    await start(ui, lan_access=True, public_network=True)
    ui.connection.script(methods.STATUS, Unavailable("not now"))
    created = {
        "key": {"id": "k1", "name": "laptop", "prefix": "pair-SSSS", "created_at": 1.0},
        "secret": "pair-" + "S" * 43,
    }
    ui.connection.script(methods.APIKEYS_CREATE, created)
    (key,) = await emitted(ui.controller.key_created, lambda: ui.controller.create_key("laptop"))
    assert key.lan_access is False
    dialog = ui.page.lan_box.secret_dialog
    assert dialog is not None
    assert any("LAN access is off" in label.text() for label in dialog.findChildren(QLabel))
    dialog.close()
    await settle()
