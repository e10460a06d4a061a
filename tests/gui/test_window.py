"""The window, its pages, banners and tray against a scripted connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from app.broker.state import Ownership, ServiceState
from app.icons import app_icon, state_icon
from app.tray import Tray
from app.window.empty_page import EmptyPage
from app.window.main_window import EMPTY_PAGES, MINIMUM_SIZE
from app.window.service_status import RECONNECT_TIP
from backend.protocol import methods
from tests.gui.helpers import settle
from tests.gui.window_rig import WindowRig as Ui
from tests.gui.window_rig import window_rig


@pytest.fixture
async def ui(qtbot: QtBot, tmp_path: Path) -> AsyncIterator[Ui]:
    async with window_rig(qtbot, tmp_path) as rig:
        yield rig


def error(error_id: str, severity: str = "error", **extra: Any) -> dict[str, Any]:
    return {
        "id": error_id, "node_id": "n1", "message": f"{error_id} is broken",
        "severity": severity, "created_at": 1.0, "updated_at": 1.0, **extra,
    }  # fmt: skip


async def test_every_placeholder_page_explains_itself(ui: Ui) -> None:
    for name, title, _, _ in EMPTY_PAGES:
        ui.window.show_page(name)
        page = ui.window.stack.currentWidget()
        assert isinstance(page, EmptyPage)
        assert ui.window.current_page == name
        assert page.headline.text()
        assert len(page.message.text()) > 20, title


async def test_service_box_follows_the_connection(ui: Ui) -> None:
    box = ui.window.service_page.status_box
    ui.connection.become_ready(Ownership.OWNED)
    assert box.state_label.text() == "<b>Ready</b>"
    assert "PID 4242" in box.details.text()
    assert box.restart_button.text() == "Restart"
    assert box.start_button.isHidden()
    ui.connection.lose_session()
    ui.connection.become_ready(Ownership.ATTACHED)
    assert box.restart_button.text() == "Reconnect"
    assert box.restart_button.toolTip() == RECONNECT_TIP
    assert "leaves it running" in box.description.text()
    ui.connection.lose_session(ServiceState.FAILED)
    assert not box.start_button.isHidden()
    assert box.restart_button.isHidden()
    assert ui.window.service_notice.isVisibleTo(ui.window)
    assert ui.window.status_text.text() == "Service: Failed"
    box.start_button.click()
    assert ui.connection._command is not None


async def test_error_banners_follow_the_errors_model(ui: Ui) -> None:
    banners = ui.window.error_banners
    assert not banners.isVisibleTo(ui.window)
    ui.connection.push(methods.ERRORS_UPDATE, [error("a"), error("b", "warning")])
    assert [banner.message.text() for banner in banners.banners] == [
        "a is broken",
        "b is broken",
    ]
    assert banners.isVisibleTo(ui.window)
    ui.connection.push(methods.ERRORS_UPDATE, [error(str(i)) for i in range(6)])
    assert len(banners.banners) == 4
    ui.connection.push(methods.ERRORS_UPDATE, [])
    assert not banners.isVisibleTo(ui.window)


async def test_banner_buttons_run_the_error_actions(ui: Ui) -> None:
    action = {"kind": "restart-component", "label": "Restart proxy", "target": "proxy"}
    ui.connection.push(methods.ERRORS_UPDATE, [error("crash", action=action)])
    banner = ui.window.error_banners.banners[0]
    buttons = {button.text(): button for button in banner.findChildren(QPushButton)}
    buttons["Restart proxy"].click()
    buttons["Dismiss"].click()
    await settle()
    assert (methods.COMPONENTS_RESTART.name, {"name": "proxy"}) in ui.connection.calls
    assert (methods.ERRORS_CLEAR.name, {"id": "crash", "node_id": "n1"}) in ui.connection.calls


async def test_closing_without_a_tray_asks_to_quit(qtbot: QtBot, ui: Ui) -> None:
    ui.window.show()
    with qtbot.waitSignal(ui.window.quit_requested):
        ui.window.close()


async def test_closing_with_a_tray_hides_the_window(qtbot: QtBot, ui: Ui) -> None:
    ui.window.hide_on_close = True
    ui.window.show()
    with qtbot.assertNotEmitted(ui.window.quit_requested):
        ui.window.close()
    assert not ui.window.isVisible()


async def test_log_level_combo_reflects_pushes_and_calls_the_broker(ui: Ui) -> None:
    combo = ui.window.service_page.logging_box.level_combo
    ui.connection.become_ready()
    ui.connection.push(methods.SETTINGS_CHANGED, {"values": {"log_level": "warning"}, "schema": []})
    assert combo.currentData() == "warning"
    assert combo.isEnabled()
    ui.connection.script(methods.LOG_SET_LEVEL, {"level": "debug"})
    combo.activated.emit(combo.findData("debug"))
    await settle()
    assert (methods.LOG_SET_LEVEL.name, {"level": "debug"}) in ui.connection.calls
    assert combo.currentData() == "debug"


async def test_tray_reflects_the_state(ui: Ui) -> None:
    tray = Tray(ui.connection, ui.service)
    assert not tray.icon.icon().isNull()
    assert tray.start_action.isVisible() is False
    ui.connection.lose_session(ServiceState.FAILED)
    assert tray.start_action.isVisible()
    assert tray.icon.toolTip() == "PAIR service: Failed"
    ui.connection.become_ready()
    assert tray.status_action.text() == "PAIR service: Ready"


def test_icons_are_drawn_for_every_state() -> None:
    assert not app_icon().isNull()
    for state in ServiceState:
        assert not state_icon(state).pixmap(22, 22).isNull()


async def test_the_window_never_gets_smaller_than_its_pages_need(ui: Ui) -> None:
    ui.window.resize(640, 480)
    size = ui.window.size()
    assert size.width() >= MINIMUM_SIZE.width() >= 900
    assert size.height() >= MINIMUM_SIZE.height()
