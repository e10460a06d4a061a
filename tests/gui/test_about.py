"""The About box (version, commit, the service's version, data folder, licences), where it is
reached from, and the icons drawn from ``resources/icons/pair.svg``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer
from pytestqt.qtbot import QtBot

from app import bundle
from app.application import PairApplication
from app.broker.state import Ownership, ServiceState
from app.controllers.components import ComponentsController
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.icons import APP_ICON_FILE, BRAND, app_icon, state_icon
from app.models.components import ComponentsModel
from app.models.errors import ErrorsModel
from app.options import AppOptions
from app.stores.components import ComponentsStore
from app.stores.settings import SettingsStore
from app.tray import Tray
from app.window.about_dialog import NOT_CONNECTED, AboutDialog
from app.window.look import STATE_LOOKS
from app.window.main_window import MainWindow
from backend.common import buildinfo
from backend.protocol import methods
from tests.gui.helpers import FakeConnection, wait_until

SVG = Path(__file__).resolve().parents[2] / "resources" / "icons" / "pair.svg"


def version_info(version: str, commit: str | None) -> dict[str, object]:
    return {"version": version, "protocol": 1, "python": "3.12", "platform": "x", "commit": commit}


@dataclass
class AboutUi:
    connection: FakeConnection
    service: ServiceController
    dialog: AboutDialog


@pytest.fixture
async def about(qtbot: QtBot, tmp_path: Path) -> AsyncIterator[AboutUi]:
    connection = FakeConnection()
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, tmp_path / "node", lambda _url: True)
    dialog = AboutDialog(connection, service, version="1.2.3", commit="1a2b3c4")
    qtbot.addWidget(dialog)
    yield AboutUi(connection, service, dialog)
    await service.close()
    await settings.close()
    await connection.stop()


def rendered_svg(size: int, fill: str = BRAND) -> QImage:
    """The SVG file drawn on its own, with its brand fill replaced by ``fill``."""
    renderer = QSvgRenderer(SVG.read_bytes().replace(BRAND.encode(), fill.encode()))
    assert renderer.isValid()
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image


def image_of(icon: QIcon, size: int) -> QImage:
    return (
        icon.pixmap(size, size).toImage().convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
    )


async def test_about_shows_version_commit_data_folder_and_licences(about: AboutUi) -> None:
    dialog = about.dialog
    assert dialog.windowTitle() == "About PAIR"
    assert dialog.app_version.text() == "1.2.3 (commit 1a2b3c4)"
    assert dialog.data_dir.text() == str(about.service.data_dir)
    assert dialog.service_version.text() == NOT_CONNECTED
    assert "Apache License 2.0" in dialog.licences.text()
    assert "PySide6" in dialog.licences.text() and "LGPL" in dialog.licences.text()
    assert dialog.qt_version.text().startswith("Qt ")
    assert "PAIR app: 1.2.3 (commit 1a2b3c4)" in dialog.details()


async def test_about_shows_the_service_version_while_connected(about: AboutUi) -> None:
    about.connection.script(methods.VERSION, version_info("1.2.4", "9f9f9f9"))
    about.connection.become_ready(Ownership.ATTACHED)
    await wait_until(lambda: about.dialog.service_version.text() != NOT_CONNECTED, 5)
    assert about.dialog.service_version.text() == "1.2.4 (commit 9f9f9f9)"
    about.connection.lose_session(ServiceState.DISCONNECTED)
    assert about.dialog.service_version.text() == NOT_CONNECTED


async def test_a_service_without_a_commit_shows_its_version_alone(about: AboutUi) -> None:
    info = version_info("1.2.4", None)
    del info["commit"]  # an older broker's answer has no commit field
    about.connection.script(methods.VERSION, info)
    about.connection.become_ready(Ownership.OWNED)
    await wait_until(lambda: about.dialog.service_version.text() == "1.2.4", 5)
    assert about.service.info.broker_commit is None


async def test_about_without_a_commit_shows_the_version_alone(qtbot: QtBot, about: AboutUi) -> None:
    dialog = AboutDialog(about.connection, about.service, version="1.2.3", commit=None)
    qtbot.addWidget(dialog)
    assert dialog.app_version.text() == "1.2.3"


async def test_the_window_and_the_tray_open_about(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(buildinfo, "commit", lambda: "1a2b3c4")
    app = PairApplication(AppOptions(tmp_path / "node"), use_tray=False, open_url=lambda _u: True)
    try:
        assert app.about_dialog is None, "made only when asked for"
        app.window.about_button.click()
        assert app.about_dialog is not None and app.about_dialog.isVisible()
        assert app.about_dialog.app_version.text() == f"{buildinfo.VERSION} (commit 1a2b3c4)"
        assert app.about_dialog.parent() is app.window
        app.about_dialog.hide()
        app.window.about_requested.emit()
        assert app.about_dialog.isVisible()
    finally:
        await app.shutdown()
    assert not app.about_dialog.isVisible()


async def test_the_tray_menu_has_about(qtbot: QtBot, tmp_path: Path) -> None:
    connection = FakeConnection()
    service = ServiceController(connection, SettingsStore(connection), tmp_path, lambda _: True)
    tray = Tray(connection, service)
    assert tray.about_action in tray.menu.actions()
    assert tray.menu.actions().index(tray.about_action) < tray.menu.actions().index(
        tray.quit_action
    )
    with qtbot.waitSignal(tray.about_requested):
        tray.about_action.trigger()
    await service.close()
    await connection.stop()


def test_the_svg_is_found_in_the_checkout() -> None:
    assert bundle.resource_path(APP_ICON_FILE) == SVG
    assert SVG.is_file()
    assert BRAND in SVG.read_text(), "state icons tint the mark by replacing this fill"


def test_a_frozen_app_finds_the_svg_in_its_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert bundle.resource_path("icons/pair.svg") == tmp_path / "resources" / "icons" / "pair.svg"


@pytest.mark.parametrize("size", [16, 32, 64])
def test_the_app_icon_is_the_svg(size: int) -> None:
    assert image_of(app_icon(), size) == rendered_svg(size)


async def test_the_window_icon_and_sidebar_mark_are_the_svg(qtbot: QtBot, tmp_path: Path) -> None:
    connection = FakeConnection()
    service = ServiceController(connection, SettingsStore(connection), tmp_path, lambda _: True)
    store = ComponentsStore(connection)
    components = ComponentsController(connection, ComponentsModel(), store)
    errors = ErrorsController(connection, ErrorsModel(), components)
    window = MainWindow(
        connection, service, components.model, errors.model, errors, hide_on_close=False
    )
    qtbot.addWidget(window)
    assert image_of(window.windowIcon(), 48) == rendered_svg(48)
    for controller in (service, errors, components, store):
        await controller.close()
    await connection.stop()


def test_state_icons_are_the_svg_in_the_state_colour() -> None:
    assert image_of(state_icon(ServiceState.READY), 64) == rendered_svg(64)
    for state in (ServiceState.FAILED, ServiceState.CONNECTING, ServiceState.DISCONNECTED):
        colour = STATE_LOOKS[state].colour
        image = image_of(state_icon(state), 64)
        assert image == rendered_svg(64, colour.name())
        # The middle of the mark is its fill (the triangle is drawn as an outline).
        assert image.pixelColor(32, 32) == colour


async def test_the_tray_icon_is_the_svg_with_a_status_dot(tmp_path: Path) -> None:
    connection = FakeConnection()
    service = ServiceController(connection, SettingsStore(connection), tmp_path, lambda _: True)
    tray = Tray(connection, service)
    shown = image_of(tray.icon.icon(), 64)
    mark = rendered_svg(64, STATE_LOOKS[connection.state].colour.name())
    # The dot covers the bottom right corner; the top half is the mark as the SVG draws it.
    assert shown.copy(0, 0, 64, 28) == mark.copy(0, 0, 64, 28)
    await service.close()
    await connection.stop()


def test_without_the_svg_the_mark_is_drawn(tmp_path: Path) -> None:
    missing = tmp_path / "pair.svg"
    drawn = image_of(app_icon(missing), 64)
    assert not drawn.isNull()
    assert drawn.pixelColor(32, 32) == QColor(BRAND)
    assert drawn != rendered_svg(64)
