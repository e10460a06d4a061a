"""Settings → Service: the demo's wording, the inference check's slot, the recent log lines,
and the reset confirmation (what it lists, the models' size, the refusal while attached)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.broker.state import Ownership
from app.controllers.reset_data import NOT_OURS
from app.controllers.reset_data_files import DELETED
from app.controllers.service import TAIL_BYTES, ServiceController, read_tail, running_in_demo
from app.models.components import ComponentsModel
from app.stores.settings import SettingsStore
from app.window.reset_data_dialog import size_text
from app.window.service_page import ServicePage
from app.window.service_status import DEMO_NOTE
from backend.devtools.demo import app_environment
from tests.gui.helpers import FakeConnection, wait_until


@dataclass
class Page:
    connection: FakeConnection
    service: ServiceController
    widget: ServicePage
    data_dir: Path


async def make_page(qtbot: QtBot, data_dir: Path, *, demo: bool) -> AsyncIterator[Page]:
    connection = FakeConnection()
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, data_dir, lambda _url: True, demo=demo)
    widget = ServicePage(connection, service, ComponentsModel())
    qtbot.addWidget(widget)
    yield Page(connection, service, widget, data_dir)
    await widget.close_tasks()
    await service.close()
    await settings.close()
    await connection.stop()


@pytest.fixture
async def page(qtbot: QtBot, data_dir: Path) -> AsyncIterator[Page]:
    async for made in make_page(qtbot, data_dir, demo=False):
        yield made


@pytest.fixture
async def demo_page(qtbot: QtBot, data_dir: Path) -> AsyncIterator[Page]:
    async for made in make_page(qtbot, data_dir, demo=True):
        yield made


def test_the_demo_marks_the_app_it_starts(tmp_path: Path) -> None:
    assert running_in_demo(app_environment(tmp_path))
    assert running_in_demo({"PAIR_DEMO": "1"})
    assert not running_in_demo({}) and not running_in_demo({"PAIR_DEMO": "0"})


async def test_an_attached_service_is_left_running_but_the_demos_is_not(
    page: Page, demo_page: Page
) -> None:
    page.connection.become_ready(Ownership.ATTACHED)
    assert "quitting the app leaves it running" in page.widget.status_box.description.text()
    demo_page.connection.become_ready(Ownership.ATTACHED)
    text = demo_page.widget.status_box.description.text()
    assert text == DEMO_NOTE and "leaves it running" not in text


async def test_the_check_slot_is_hidden_until_a_widget_is_added(page: Page) -> None:
    page.widget.show()
    assert page.widget.check_slot.isHidden()
    check = QLabel("check")
    page.widget.add_check_widget(check)
    assert not page.widget.check_slot.isHidden() and check.parent() is page.widget.check_slot


async def test_the_log_viewer_shows_each_logs_last_lines(page: Page) -> None:
    logs = page.data_dir / "logs"
    logs.mkdir()
    (logs / "broker.log").write_text("".join(f"service line {n}\n" for n in range(3)))
    page.widget.show()  # the shown tab (the service's log) is read at once
    view = page.widget.logs_viewer.views["service"]
    await wait_until(lambda: "service line 2" in view.text.toPlainText(), 5, "service log")
    assert view.status.text() == "last 3 lines"
    page.widget.logs_viewer.tabs.setCurrentIndex(1)
    app_view = page.widget.logs_viewer.views["app"]
    await wait_until(lambda: app_view.status.text() == "nothing logged yet", 5, "app log")
    (logs / "app.log").write_text("app line\n")
    app_view.refresh_button.click()
    await wait_until(lambda: app_view.text.toPlainText() == "app line", 5, "refreshed")


def test_a_tail_drops_the_line_its_seek_cut(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    line = "x" * 99 + "\n"
    path.write_text(line * (TAIL_BYTES // 100 + 50))
    tail = read_tail(path, lines=10_000)
    assert all(text == "x" * 99 for text in tail)
    assert len(read_tail(path, lines=5)) == 5


async def test_the_reset_dialog_lists_what_goes_and_sizes_the_models(page: Page) -> None:
    store = page.data_dir / "models" / "llamacpp"
    store.mkdir(parents=True)
    (store / "a.gguf").write_bytes(bytes(3_000_000))
    page.connection.become_ready(Ownership.OWNED)
    dialog = page.widget.reset_box.dialog
    page.widget.reset_box.reset_button.click()
    listed = dialog.deleted.text()
    assert all(f"<tt>{kind.name}</tt>" in listed for kind in DELETED)
    assert str(page.widget.reset_controller.log_dir) in listed
    check = dialog.models_check
    await wait_until(lambda: check.isEnabled(), 5, "the models measured")
    assert size_text(3_000_000) in check.text() and not check.isChecked()
    assert dialog.reset_button.isEnabled() and dialog.refusal.isHidden()
    dialog.reject()


async def test_the_reset_dialog_refuses_while_attached(page: Page) -> None:
    page.connection.become_ready(Ownership.ATTACHED)
    dialog = page.widget.reset_box.dialog
    page.widget.reset_box.reset_button.click()
    assert not dialog.reset_button.isEnabled()
    assert dialog.refusal.text() == NOT_OURS and not dialog.refusal.isHidden()
    await wait_until(lambda: "there are none" in dialog.models_check.text(), 5, "measured")
    dialog.reject()


def test_sizes_read_in_megabytes_or_gigabytes() -> None:
    assert size_text(450_000_000) == "450\u00a0MB"
    assert size_text(3_200_000_000) == "3.2\u00a0GB"
