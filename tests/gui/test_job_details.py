"""A job's details: opened from the Jobs list (double-click, Enter, the Details button), its
facts and timeline read from ``jobs:get``, the whole error selectable; and the list's rough
edges: one time column ordering the rows, a state filter that does not flicker between the
table and the empty state while requests come and go, a checked chip whose dot stays visible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QPlainTextEdit
from pytestqt.qtbot import QtBot

from app.controllers.jobs import JobsController
from app.models.job_text import TITLES, JobColumn, clock_time
from app.models.jobs import JobsModel, job_state_colour
from app.stores.discovery import DiscoveryStore
from app.stores.jobs import JobsStore
from app.window.job_details import JobDetailsDialog
from app.window.jobs_page import JobsPage
from backend.protocol import methods
from tests.gui.helpers import FakeConnection, wait_until
from tests.gui.test_jobs import GPU, NOW, SELF, job, ready_with, upsert

ERROR = "the engine answered 500 Internal Server Error:\n  CUDA out of memory (tried 2.1 GiB)"


@pytest.fixture
def model() -> JobsModel:
    return JobsModel(now=lambda: NOW)


@pytest.fixture
async def controller(connection: FakeConnection, model: JobsModel) -> Any:
    jobs_store, discovery = JobsStore(connection), DiscoveryStore(connection)
    jobs = JobsController(connection, model, jobs_store, discovery)
    yield jobs
    for closing in (jobs, jobs_store, discovery):
        await closing.close()


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "pair.ini"), QSettings.Format.IniFormat)


def _failed_twice() -> dict[str, Any]:
    created = NOW - 1000 + 7
    return job(
        7, "failed", attempt=2, error=ERROR, client="guest laptop", client_address="192.168.1.9",
        path="/v1/chat/completions", first_token_at=created + 1.5, chunks=41,
        completed_at=created + 3.5,
    )  # fmt: skip


def _timeline(created: float) -> list[dict[str, Any]]:
    return [
        {"seq": 1, "kind": "submitted", "at": created + 0.01, "attempt": 1, "node": SELF},
        {"seq": 2, "kind": "submitted", "at": created + 0.2, "attempt": 2, "node": GPU},
        {"seq": 3, "kind": "started", "at": created + 0.5, "attempt": 2, "node": GPU},
        {"seq": 4, "kind": "errored", "at": created + 3.5, "attempt": 2, "error": ERROR},
    ]


async def test_double_click_opens_the_details_with_the_timeline_from_the_broker(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    failed = _failed_twice()
    await ready_with(connection, model, job(1), failed)
    connection.script(
        methods.JOBS_GET, {"job": failed, "timeline": _timeline(failed["created_at"])}
    )
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    page.show()
    row = page.table.visualRect(page.filter_model.index(0, JobColumn.MODEL))
    qtbot.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton, pos=row.center())
    qtbot.mouseDClick(page.table.viewport(), Qt.MouseButton.LeftButton, pos=row.center())
    dialog = page.details_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.addWidget(dialog)
    await wait_until(lambda: connection.called(methods.JOBS_GET) == [{"key": failed["key"]}])
    await wait_until(lambda: dialog.timeline.topLevelItemCount() == 6)
    facts = _facts(dialog)
    assert facts["Client API"] == "OpenAI (/v1/chat/completions)"
    assert facts["Client"] == 'API key "guest laptop" from 192.168.1.9'
    assert facts["Attempts"] == "attempt 2 of 5"
    assert facts["Ran on"] == "gpu-box"
    assert facts["Time to first token"] == "1.5 s"
    assert facts["Tokens"] == "about 41 (streamed chunks)"
    assert facts["Tokens/s"] == "about 20.5 tokens/s"
    lines = [_item(dialog, n) for n in range(6)]
    assert [line[2] for line in lines] == [
        "Received (queued)",
        "Sent to workstation (attempt 1)",
        "Sent to gpu-box (attempt 2)",
        "Running on gpu-box (attempt 2)",
        "First token sent to the client",
        f"Failed: {ERROR}",
    ]
    assert lines[2][1] == "+200 ms"
    error = dialog.findChild(QPlainTextEdit)
    assert error is not None and error.isReadOnly() and error.toPlainText() == ERROR
    assert error.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse


async def test_enter_and_the_details_button_open_the_selected_job(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    await ready_with(connection, model, job(1), job(2, "running"))
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    page.show()
    assert not page.details_button.isEnabled(), "nothing selected"
    page.table.selectRow(1)
    assert page.details_button.isEnabled()
    page.details_button.click()
    await wait_until(lambda: connection.called(methods.JOBS_GET) == [{"key": f"{SELF}/run1/1"}])
    dialog = page.details_dialog
    assert dialog is not None
    qtbot.addWidget(dialog)
    # The answer here is an error (an unscripted call): the dialog says so, the facts stay.
    await wait_until(lambda: "could not be read" in dialog.status.text())
    page.table.setFocus()
    page.table.selectRow(0)
    qtbot.keyClick(page.table, Qt.Key.Key_Return)
    await wait_until(lambda: connection.called(methods.JOBS_GET)[-1] == {"key": f"{SELF}/run1/2"})
    assert page.details_dialog is dialog and dialog.key == f"{SELF}/run1/2"
    assert _facts(dialog)["State"] == "Running"


async def test_a_refused_request_reads_as_answered_by_the_door(qtbot: QtBot) -> None:
    refused = job(3, "failed", engine="", target=None, serving=None, started_at=None,
                  attempt=0, error="model 'nope:1b' not found")  # fmt: skip
    from tests.gui.test_jobs import record

    dialog = JobDetailsDialog(record(3, **{k: v for k, v in refused.items() if k != "key"}),
                              lambda node: node or "", now=lambda: NOW)  # fmt: skip
    qtbot.addWidget(dialog)
    facts = _facts(dialog)
    assert (facts["Engine"], facts["Ran on"], facts["Attempts"]) == (
        "None (never sent)", "No computer", "None",
    )  # fmt: skip
    assert _item(dialog, 1)[2] == "Failed: model 'nope:1b' not found"


async def test_the_time_column_is_when_each_job_was_received_and_orders_the_rows(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
) -> None:  # fmt: skip
    # Job 1 ended last, job 3 first: ordered and labelled by when each was received.
    await ready_with(connection, model, job(1, completed_at=NOW - 5), job(3), job(2))
    assert TITLES[JobColumn.TIME] == "Started"
    times = [model.data(model.index(row, JobColumn.TIME)) for row in range(3)]
    assert times == [clock_time(NOW - 1000 + n, NOW) for n in (3, 2, 1)]


async def test_a_state_filter_keeps_the_table_while_requests_come_and_go(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    await ready_with(connection, model, job(1))
    page = JobsPage(controller, settings, empty_grace_ms=300)
    qtbot.addWidget(page)
    page.filter_bar.state_buttons["in_flight"].click()
    page.filter_bar.state_buttons["running"].click()
    assert page.body.currentWidget() is page.empty_state, "a filter the user set: at once"
    seq = 11
    for n in (2, 3, 4):
        for state in ("in_flight", "running", "completed"):
            connection.push(methods.JOBS_EVENT, upsert(seq, job(n, state)))
            seq += 1
            if n > 2 or state != "in_flight":
                assert page.body.currentWidget() is page.table, (n, state)
    await wait_until(lambda: page.body.currentWidget() is page.empty_state)
    assert page.empty_state.headline.text() == "No jobs match these filters"


def test_a_checked_running_chip_keeps_its_blue_dot_visible(qtbot: QtBot, model: JobsModel) -> None:
    from app.window.jobs_filters import JobsFilterBar

    bar = JobsFilterBar(model)
    qtbot.addWidget(bar)
    chip = bar.state_buttons["running"]
    chip.setChecked(True)
    bar.show()
    image = chip.grab().toImage()
    background = image.pixelColor(image.width() - 8, image.height() // 2)
    assert _distance(background, job_state_colour("running")) > 120


def _distance(one: QColor, other: QColor) -> float:
    return float(
        sum((a - b) ** 2 for a, b in zip(one.getRgb()[:3], other.getRgb()[:3], strict=True)) ** 0.5
    )


def _facts(dialog: JobDetailsDialog) -> dict[str, str]:
    return {name: value.text() for name, value in dialog.fact_values.items()}


def _item(dialog: JobDetailsDialog, row: int) -> tuple[str, str, str]:
    item = dialog.timeline.topLevelItem(row)
    return item.text(0), item.text(1), item.text(2)
