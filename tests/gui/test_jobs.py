"""The Jobs page: its model (Qt's contract, row-level changes, live durations, dimmed finished
rows), the filter proxy, the controller against a scripted connection, and the page itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.broker.state import ServiceState
from app.controllers.jobs import JobsController
from app.models.job_text import JobColumn, clock_time, format_job_duration
from app.models.jobs import JobFilter, JobsFilterModel, JobsModel
from app.models.keyed_table import ROW_ROLE
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.jobs import JobsStore
from app.window.jobs_page import JobsPage, load_filter
from app.window.shortcuts import focus_search_of
from backend.protocol import methods
from backend.protocol.types.jobs import JobRecord
from tests.gui.helpers import EngineEvents, FakeConnection, settle, wait_until

NOW = 1_750_000_000.0
SELF = "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
GPU = "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
LAPTOP = "33333333-cccc-4ccc-8ccc-cccccccccccc"
IDLE = "44444444-dddd-4ddd-8ddd-dddddddddddd"
OTHER = "55555555-eeee-4eee-8eee-eeeeeeeeeeee"


def job(n: int, state: str = "completed", **extra: Any) -> dict[str, Any]:
    """A job as the broker sends it; job ``n`` was received ``n`` seconds after the first."""
    created = NOW - 1000 + n
    fields: dict[str, Any] = {
        "key": f"{SELF}/run1/{n}", "engine": "ollama", "model": "llama3.1:8b", "origin": SELF,
        "run_id": "run1", "state": state, "created_at": created, "seq": 3, "attempt": 1,
        "path": "/api/chat", "target": GPU,
    }  # fmt: skip
    if state in ("running", "completed", "failed", "cancelled"):
        fields.update(serving=GPU, started_at=created + 0.5)
    if state in ("completed", "failed", "cancelled"):
        fields["completed_at"] = created + 2.5
    fields.update(extra)
    return fields


def record(n: int, state: str = "completed", **extra: Any) -> JobRecord:
    return msgspec.convert(job(n, state, **extra), JobRecord)


def upsert(seq: int, payload: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "event": "upsert", "key": payload["key"], "workload": payload}


def remove(seq: int, n: int) -> dict[str, Any]:
    return {"seq": seq, "event": "remove", "key": f"{SELF}/run1/{n}"}


def node(node_id: str, name: str, *sources: str) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": list(sources or ["mdns"]),
        "addresses": [], "ports": {}, "engines": {}, "reachable": True,
    }  # fmt: skip


def keys(model: JobsModel | JobsFilterModel) -> list[int]:
    """The job numbers shown, top to bottom."""
    rows = (model.data(model.index(row, 0), ROW_ROLE) for row in range(model.rowCount()))
    return [int(row.key.rsplit("/", 1)[1]) for row in rows]


@pytest.fixture
def model() -> JobsModel:
    return JobsModel(now=lambda: NOW)


@pytest.fixture
async def controller(connection: FakeConnection, model: JobsModel) -> AsyncIterator[JobsController]:
    jobs_store, discovery = JobsStore(connection), DiscoveryStore(connection)
    jobs = JobsController(connection, model, jobs_store, discovery)
    yield jobs
    for closing in (jobs, jobs_store, discovery):
        await closing.close()


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[QSettings]:
    """A settings file of the test's own: nothing reaches the user's configuration."""
    store = QSettings(str(tmp_path / "pair.ini"), QSettings.Format.IniFormat)
    yield store
    store.sync()


async def ready_with(
    connection: FakeConnection, model: JobsModel, *jobs: dict[str, Any], seq: int = 10
) -> None:
    connection.script(methods.JOBS_SUBSCRIBE, {"seq": seq, "workloads": list(jobs)})
    connection.script(
        methods.DISCOVERY_SUBSCRIBE,
        {"seq": 4, "nodes": [node(SELF, "workstation", "self"), node(GPU, "gpu-box")]},
    )
    connection.become_ready()
    await wait_until(lambda: model.rowCount() == len(jobs) and model.node_label(GPU) == "gpu-box")


# The model ------------------------------------------------------------------------------------


def test_the_model_keeps_qts_contract_empty_filled_and_through_changes(
    qtmodeltester: ModelTester, model: JobsModel
) -> None:
    qtmodeltester.check(model)
    model.reset([record(n, state) for n, state in enumerate(["completed", "running", "failed"])])
    qtmodeltester.check(model)
    model.upsert(record(7, "in_flight"))
    model.upsert(record(1, "completed"))
    model.upsert(record(-5, "cancelled"))  # older than every row: inserted at the bottom
    model.remove(f"{SELF}/run1/0")
    model.sync([record(7, "running"), record(9, "in_flight")])
    model.tick()
    model.set_node_names({GPU: "gpu-box"}, SELF)
    model.set_members({LAPTOP: "laptop", GPU: "gpu-box"})
    qtmodeltester.check(model, force_py=True)
    model.clear()
    qtmodeltester.check(model)


def test_the_filter_proxy_keeps_qts_contract(qtmodeltester: ModelTester, model: JobsModel) -> None:
    shown = JobsFilterModel(model)
    model.reset([record(n, state) for n, state in enumerate(["completed", "running", "failed"])])
    qtmodeltester.check(shown)
    shown.set_filter(JobFilter(states=frozenset({"running", "in_flight"})))
    model.upsert(record(5, "in_flight"))
    model.upsert(record(1, "completed"))
    shown.set_filter(JobFilter(text="LLAMA"))
    qtmodeltester.check(shown, force_py=True)


def test_rows_are_newest_first_and_change_one_row_at_a_time(qtbot: QtBot, model: JobsModel) -> None:
    model.reset([record(2), record(5, "running"), record(1)])
    assert keys(model) == [5, 2, 1]
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsInserted) as added:
        model.upsert(record(9, "in_flight"))
    assert added.args[1:] == [0, 0]
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.dataChanged) as changed:
        model.upsert(record(5, "completed"))
    assert (changed.args[0].row(), changed.args[1].column()) == (1, len(JobColumn) - 1)
    with qtbot.assertNotEmitted(model.dataChanged):
        model.upsert(record(5, "completed"))  # the same job again
    with qtbot.waitSignal(model.rowsRemoved) as removed:
        assert model.remove(f"{SELF}/run1/2")
    assert removed.args[1:] == [2, 2]
    assert not model.remove("no-such-job")
    assert keys(model) == [9, 5, 1]
    assert model.position(f"{SELF}/run1/1") == 2


def test_cells_read_as_sentences_with_node_names(model: JobsModel) -> None:
    model.set_node_names({SELF: "workstation", GPU: "gpu-box"}, SELF)
    model.reset([
        record(1, "in_flight", serving=None, started_at=None, completed_at=None, attempt=2),
        record(2, "running", model="lmstudio-community/qwen3-30b-a3b", engine="lmstudio"),
        record(3, "failed", target=LAPTOP, serving=None, started_at=None, error="boom\n  bad"),
        record(4, "completed"),
    ])  # fmt: skip

    def cell(n: int, column: JobColumn, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        return model.data(model.index(model.position(f"{SELF}/run1/{n}") or 0, column), role)

    created = NOW - 1000
    assert cell(1, JobColumn.TIME) == clock_time(created + 1, NOW)
    assert cell(1, JobColumn.COMPUTER) == "workstation → gpu-box"  # where it was sent
    assert cell(1, JobColumn.STATE) == "In flight · attempt 2 of 5"
    assert cell(2, JobColumn.STATE) == "Running"
    assert cell(2, JobColumn.TIME) == clock_time(created + 2, NOW)
    assert cell(2, JobColumn.COMPUTER) == "workstation → gpu-box"
    assert (cell(2, JobColumn.MODEL), cell(2, JobColumn.ENGINE)) == ("qwen3-30b-a3b", "LM Studio")
    assert "lmstudio-community/qwen3-30b-a3b" in cell(
        2, JobColumn.MODEL, Qt.ItemDataRole.ToolTipRole
    )
    assert cell(3, JobColumn.TIME) == clock_time(created + 3, NOW)
    assert cell(3, JobColumn.COMPUTER, Qt.ItemDataRole.ToolTipRole) == (
        f"Asked on workstation ({SELF})\nSent to 33333333 ({LAPTOP})"
    )
    assert cell(3, JobColumn.ERROR) == "boom bad"
    assert cell(3, JobColumn.ERROR, Qt.ItemDataRole.ToolTipRole) == "boom\n  bad"
    assert cell(4, JobColumn.TIME) == clock_time(created + 4, NOW)  # received, as rows sort
    assert cell(4, JobColumn.COMPUTER) == "workstation → gpu-box"  # asked here, ran there
    assert cell(3, JobColumn.COMPUTER) == "workstation → 33333333"  # sent there, never ran
    assert cell(4, JobColumn.COMPUTER, Qt.ItemDataRole.ToolTipRole) == (
        f"Asked on workstation ({SELF})\nRan on gpu-box ({GPU})"
    )
    model.upsert(record(5, origin=GPU))
    assert cell(5, JobColumn.COMPUTER) == "gpu-box"  # asked and ran on one computer
    model.upsert(record(6, "cancelled", target=None, serving=None, started_at=None))
    assert cell(6, JobColumn.COMPUTER) == "workstation"
    assert cell(6, JobColumn.TIME) == clock_time(created + 6, NOW)
    assert "Never reached a computer" in cell(6, JobColumn.TIME, Qt.ItemDataRole.ToolTipRole)
    assert cell(4, JobColumn.DURATION) == "2.5 s"
    assert "Started on gpu-box" in cell(4, JobColumn.DURATION, Qt.ItemDataRole.ToolTipRole)


def test_durations_read_compactly() -> None:
    assert [format_job_duration(s) for s in (0.04, 0.42, 1.0, 9.96, 12.7, 185, 3725)] == [
        "40 ms", "420 ms", "1.0 s", "10.0 s", "12 s", "3 min 05 s", "1 h 02 min",
    ]  # fmt: skip
    assert format_job_duration(4.7, live=True) == "4 s"
    assert clock_time(NOW - 3 * 86400, NOW).count(":") == 2
    assert len(clock_time(NOW - 3 * 86400, NOW)) > len(clock_time(NOW, NOW))


def test_finished_rows_are_dimmed_and_failures_stay_red(model: JobsModel) -> None:
    model.reset([record(1, "running"), record(2, "completed"), record(3, "failed")])

    def colour(n: int, column: JobColumn) -> QColor | None:
        row = model.position(f"{SELF}/run1/{n}")
        assert row is not None
        colour: QColor | None = model.data(model.index(row, column), Qt.ItemDataRole.ForegroundRole)
        return colour

    assert colour(1, JobColumn.MODEL) is None
    dim = colour(2, JobColumn.MODEL)
    assert dim == QGuiApplication.palette().color(QPalette.ColorRole.PlaceholderText)
    assert colour(2, JobColumn.STATE) == dim
    assert colour(3, JobColumn.MODEL) == dim
    red = colour(3, JobColumn.STATE)
    assert red is not None and red.red() > 150 and red.green() < 100
    assert colour(3, JobColumn.ERROR) == red


def test_the_duration_of_unfinished_jobs_ticks_alone(qtbot: QtBot) -> None:
    clock = [NOW]
    model = JobsModel(now=lambda: clock[0], tick_ms=20)
    live = {40: "running", 39: "in_flight", 37: "running", 1: "running"}
    model.reset([record(n, live.get(n, "completed")) for n in range(1, 41)])
    assert model.data(model.index(0, JobColumn.DURATION)) == "16 min 00 s"
    clock[0] += 10
    changes: list[tuple[int, int, int, int]] = []
    model.dataChanged.connect(
        lambda a, b, _roles=(): changes.append((a.row(), b.row(), a.column(), b.column()))
    )
    qtbot.waitUntil(lambda: len(changes) >= 2, timeout=2000)
    duration = JobColumn.DURATION
    # Rows 0, 1 and 3 are close enough for one signal; row 39 gets its own.
    assert changes[:2] == [(0, 3, duration, duration), (39, 39, duration, duration)]
    assert model.data(model.index(0, JobColumn.DURATION)) == "16 min 10 s"
    assert model.data(model.index(2, JobColumn.DURATION)) == "2.5 s", "finished: fixed"
    for n, state in ((40, "completed"), (39, "failed"), (37, "cancelled"), (1, "completed")):
        model.upsert(record(n, state))
    assert not model.ticking, "no unfinished job: no timer"


def test_engines_and_nodes_are_tallied_for_the_filter_choices(
    qtbot: QtBot, model: JobsModel
) -> None:
    model.reset([record(1), record(2, engine="lmstudio", origin=LAPTOP)])
    assert model.engines() == ["lmstudio", "ollama"]
    assert sorted(model.nodes()) == sorted([SELF, GPU, LAPTOP])
    assert model.finished_count() == 2
    with qtbot.waitSignal(model.choices_changed):
        model.remove(f"{SELF}/run1/2")
    assert model.engines() == ["ollama"]
    assert LAPTOP not in model.nodes()
    with qtbot.assertNotEmitted(model.choices_changed):
        model.upsert(record(3))


# Filters --------------------------------------------------------------------------------------


def mixed(count: int) -> list[JobRecord]:
    states = ["in_flight", "running", "completed", "failed", "cancelled"]
    engines = ["ollama", "lmstudio", "llamacpp"]
    return [
        record(
            n,
            states[n % 5],
            engine=engines[n % 3],
            target=(GPU, LAPTOP)[n % 2],
            serving=(GPU, LAPTOP)[n % 2] if states[n % 5] != "in_flight" else None,
            model=f"model-{n % 7}",
            error="out of memory" if states[n % 5] == "failed" and n % 4 == 3 else None,
        )
        for n in range(count)
    ]


@pytest.mark.parametrize(
    ("job_filter", "expected"),
    [
        (JobFilter(states=frozenset({"running"})), lambda w: w.state == "running"),
        (
            JobFilter(states=frozenset({"failed", "cancelled"})),
            lambda w: w.state in ("failed", "cancelled"),
        ),
        (JobFilter(node=LAPTOP), lambda w: LAPTOP in (w.target, w.serving)),
        (JobFilter(node=SELF), lambda w: True),
        (JobFilter(engine="lmstudio"), lambda w: w.engine == "lmstudio"),
        (JobFilter(text="MODEL-3"), lambda w: w.model == "model-3"),
        (JobFilter(text=" memory "), lambda w: w.error == "out of memory"),
        (
            JobFilter(states=frozenset({"failed"}), engine="ollama", node=GPU, text="model"),
            lambda w: w.state == "failed" and w.engine == "ollama" and w.target == GPU,
        ),
    ],
)
def test_each_kind_of_filter(model: JobsModel, job_filter: JobFilter, expected: Any) -> None:
    model.reset(mixed(60))
    shown = JobsFilterModel(model)
    shown.set_filter(job_filter)
    want = [int(w.key.rsplit("/", 1)[1]) for w in model.rows() if expected(w)]
    assert want, "the case filters something in"
    assert keys(shown) == want
    assert job_filter.is_active


def test_the_filter_follows_changes_and_ignores_a_same_filter(
    qtbot: QtBot, model: JobsModel
) -> None:
    shown = JobsFilterModel(model)
    model.reset([record(1, "running"), record(2)])
    shown.set_filter(JobFilter(states=frozenset({"running"})))
    assert keys(shown) == [1]
    model.upsert(record(1, "completed"))
    assert keys(shown) == []
    model.upsert(record(3, "running"))
    assert keys(shown) == [3]
    with qtbot.assertNotEmitted(shown.filter_changed):
        shown.set_filter(JobFilter(states=frozenset({"running"})))
    assert not JobFilter(text="  ").is_active


def test_filtering_ten_thousand_jobs(model: JobsModel) -> None:
    jobs = mixed(10_000)
    model.reset(jobs)
    shown = JobsFilterModel(model)
    assert shown.rowCount() == 10_000
    shown.set_filter(JobFilter(states=frozenset({"failed"}), engine="llamacpp"))
    assert shown.rowCount() == sum(w.state == "failed" and w.engine == "llamacpp" for w in jobs)
    shown.set_filter(JobFilter(text="memory"))
    assert shown.rowCount() == sum(w.error is not None for w in jobs)
    for n in range(10_000, 10_100):
        model.upsert(record(n, "failed", error="out of memory"))
    assert shown.rowCount() == sum(w.error is not None for w in jobs) + 100
    assert keys(shown)[0] == 10_099
    shown.set_filter(JobFilter())
    assert shown.rowCount() == 10_100


# The controller -------------------------------------------------------------------------------


async def test_a_snapshot_then_pushes_change_rows_without_a_reset(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController
) -> None:
    await ready_with(connection, model, job(2, "running"), job(1), seq=10)
    assert (methods.JOBS_SUBSCRIBE.name, {"limit": 1000}) in connection.calls
    assert model.data(model.index(0, JobColumn.COMPUTER)) == "workstation → gpu-box"
    assert model.data(model.index(0, JobColumn.TIME)) == clock_time(NOW - 998, NOW)
    with qtbot.assertNotEmitted(model.modelReset):
        with qtbot.waitSignal(model.rowsInserted):
            connection.push(methods.JOBS_EVENT, upsert(11, job(3, "in_flight")))
        with qtbot.waitSignal(model.dataChanged):
            connection.push(methods.JOBS_EVENT, upsert(12, job(2, "completed")))
        with qtbot.waitSignal(model.rowsRemoved):
            connection.push(methods.JOBS_EVENT, remove(13, 1))
        connection.push(methods.JOBS_EVENT, upsert(12, job(2, "failed")))  # already had
    assert keys(model) == [3, 2]
    assert model.row_at(1).state == "completed"


async def test_a_gap_subscribes_again_and_applies_the_snapshot_as_row_changes(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController
) -> None:
    await ready_with(connection, model, job(2, "running"), job(1), seq=10)
    connection.script(
        methods.JOBS_SUBSCRIBE, {"seq": 20, "workloads": [job(4), job(2, "completed")]}
    )
    with qtbot.assertNotEmitted(model.modelReset):
        connection.push(methods.JOBS_EVENT, upsert(15, job(4)))
        await wait_until(lambda: keys(model) == [4, 2])
    assert [call[0] for call in connection.calls].count(methods.JOBS_SUBSCRIBE.name) == 2
    assert model.row_at(1).state == "completed"
    connection.push(methods.JOBS_EVENT, upsert(21, job(5)))
    assert keys(model) == [5, 4, 2]


async def test_events_that_overtake_the_snapshot_apply_after_it(
    connection: FakeConnection, model: JobsModel, controller: JobsController
) -> None:
    connection.script(methods.JOBS_SUBSCRIBE, {"seq": 10, "workloads": [job(1, "running")]})
    connection.become_ready()
    connection.push(methods.JOBS_EVENT, upsert(11, job(1, "completed")))
    connection.push(methods.JOBS_EVENT, upsert(10, job(1, "failed")))  # in the snapshot
    await wait_until(lambda: model.rowCount() == 1)
    await settle()
    assert model.row_at(0).state == "completed"


async def test_the_session_ending_clears_the_jobs(
    connection: FakeConnection, model: JobsModel, controller: JobsController
) -> None:
    await ready_with(connection, model, job(1), job(2, "running"))
    connection.lose_session(ServiceState.DISCONNECTED)
    assert model.rowCount() == 0
    connection.push(methods.JOBS_EVENT, upsert(11, job(3)))
    await settle()
    assert model.rowCount() == 0, "no subscription until the next session"


async def test_node_names_follow_discovery(
    connection: FakeConnection, model: JobsModel, controller: JobsController
) -> None:
    await ready_with(connection, model, job(1, target=LAPTOP, serving=LAPTOP))
    assert model.data(model.index(0, JobColumn.COMPUTER)) == "workstation → 33333333"
    assert model.is_self(SELF)
    event = {"seq": 5, "event": "node_joined", "node_id": LAPTOP, "node": node(LAPTOP, "laptop")}
    connection.push(methods.DISCOVERY_EVENT, event)
    assert model.data(model.index(0, JobColumn.COMPUTER)) == "workstation → laptop"
    telemetry = {"seq": 6, "event": "node_telemetry", "node_id": GPU, "telemetry": {"valid": True}}
    connection.push(methods.DISCOVERY_EVENT, telemetry)
    connection.script(
        methods.DISCOVERY_SUBSCRIBE, {"seq": 30, "nodes": [node(LAPTOP, "renamed-laptop")]}
    )
    connection.push(methods.DISCOVERY_EVENT, {**event, "seq": 9})  # a gap: read them again
    await wait_until(lambda: model.node_label(LAPTOP) == "renamed-laptop")
    assert model.node_label(GPU) == "gpu-box", "names of nodes that left stay"


# The page -------------------------------------------------------------------------------------


async def test_filters_are_saved_and_restored(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    finished = [job(n) for n in range(3)]
    await ready_with(connection, model, *finished, job(5, "failed", engine="llamacpp"))
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    bar = page.filter_bar
    bar.state_buttons["failed"].click()
    bar.node_combo.setCurrentIndex(bar.node_combo.findData(GPU))
    bar.node_combo.activated.emit(bar.node_combo.currentIndex())
    bar.engine_combo.setCurrentIndex(bar.engine_combo.findData("llamacpp"))
    bar.engine_combo.activated.emit(bar.engine_combo.currentIndex())
    bar.search_field.setText("llama")
    saved = JobFilter(states=frozenset({"failed"}), node=GPU, engine="llamacpp", text="llama")
    assert page.filter_model.filter == saved
    assert keys(page.filter_model) == [5]
    assert page.count_label.text() == "1 of 4 jobs"
    assert load_filter(settings) == saved

    again = JobsPage(controller, settings)
    qtbot.addWidget(again)
    assert again.filter_model.filter == saved
    assert again.filter_bar.state_buttons["failed"].isChecked()
    assert not again.filter_bar.state_buttons["running"].isChecked()
    assert again.filter_bar.node_combo.currentData() == GPU
    assert again.filter_bar.node_combo.currentText() == "gpu-box"
    assert again.filter_bar.engine_combo.currentData() == "llamacpp"
    assert again.filter_bar.search_field.text() == "llama"
    assert keys(again.filter_model) == [5]


async def test_a_saved_node_without_jobs_stays_selectable(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    settings.setValue("jobs/node", LAPTOP)
    settings.setValue("jobs/states", "running,exploded")
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    assert page.filter_model.filter == JobFilter(states=frozenset({"running"}), node=LAPTOP)
    assert page.filter_bar.node_combo.currentData() == LAPTOP
    await ready_with(connection, model, job(1))
    assert page.filter_bar.node_combo.currentData() == LAPTOP
    home = page.filter_bar.node_combo.itemText(1)
    assert home == "workstation (this computer)", "this computer comes first"


async def test_empty_states_say_why_and_show_all_resets_the_filters(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    assert page.body.currentWidget() is page.empty_state
    assert page.empty_state.headline.text() == "No jobs to show"
    await ready_with(connection, model)
    assert page.empty_state.headline.text() == "No jobs yet"
    assert page.empty_state.show_all_button.isHidden()
    connection.push(methods.JOBS_EVENT, upsert(11, job(1)))
    assert page.body.currentWidget() is page.table
    page.filter_bar.search_field.setText("no such model")
    assert page.body.currentWidget() is page.empty_state
    assert page.empty_state.headline.text() == "No jobs match these filters"
    assert not page.empty_state.show_all_button.isHidden()
    page.empty_state.show_all_button.click()
    assert page.body.currentWidget() is page.table
    assert page.filter_bar.search_field.text() == ""
    assert load_filter(settings) == JobFilter()


async def test_clear_history_asks_then_calls_the_broker_and_the_removals_drop_rows(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    answers: list[int] = []
    agree = [False, True]

    def confirm(_parent: object, finished: int) -> bool:
        answers.append(finished)
        return agree.pop(0)

    page = JobsPage(controller, settings, confirm=confirm)
    qtbot.addWidget(page)
    await ready_with(connection, model, job(1), job(2, "running"), job(3, "failed"), seq=10)
    assert page.clear_button.isEnabled()
    page.clear_button.click()  # declined
    await settle()
    assert methods.JOBS_CLEAR.name not in [call[0] for call in connection.calls]
    connection.script(methods.JOBS_CLEAR, {"cleared": 2})
    page.clear_button.click()
    await wait_until(lambda: methods.JOBS_CLEAR.name in [call[0] for call in connection.calls])
    assert answers == [2, 2]
    connection.push(methods.JOBS_EVENT, remove(11, 1))
    connection.push(methods.JOBS_EVENT, remove(12, 3))
    assert keys(model) == [2]
    assert not page.clear_button.isEnabled(), "nothing finished left to clear"


async def test_columns_fit_their_titles_and_the_newest_job_is_on_top(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, controller: JobsController,
    settings: QSettings,
) -> None:  # fmt: skip
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    await ready_with(connection, model, job(1), job(3), job(2))
    header = page.table.horizontalHeader()
    metrics = page.table.fontMetrics()
    for column in JobColumn:
        title = model.headerData(column, Qt.Orientation.Horizontal)
        assert header.sectionSize(column) >= metrics.horizontalAdvance(title), title
    assert keys(page.filter_model) == [3, 2, 1]
    assert not page.table.isSortingEnabled()


async def test_the_computer_column_and_filter_cover_every_member(
    qtbot: QtBot, connection: FakeConnection, model: JobsModel, settings: QSettings
) -> None:
    jobs_store, discovery = JobsStore(connection), DiscoveryStore(connection)
    engines = EnginesStore(connection)
    jobs = JobsController(connection, model, jobs_store, discovery, engines=engines)
    members = [
        {"node_id": LAPTOP, "name": "laptop", "reachable": True},  # not on the network list
        {"node_id": GPU, "name": "gpu-box", "reachable": False},
        {"node_id": IDLE, "name": "attic", "reachable": True},  # a member without jobs
    ]
    connection.script(methods.ENGINE_SUBSCRIBE, EngineEvents(connection).snapshot(members=members))
    try:
        page = JobsPage(jobs, settings)
        qtbot.addWidget(page)
        await ready_with(
            connection, model,
            job(1),  # asked here, ran on gpu-box
            job(2, origin=LAPTOP, target=LAPTOP, serving=LAPTOP),  # the laptop's own
            job(3, origin=LAPTOP, target=GPU, serving=GPU),  # asked on the laptop, ran on gpu-box
            job(4, origin=SELF, target=OTHER, serving=OTHER),  # a node that is no member now
        )  # fmt: skip
        await wait_until(lambda: model.node_label(LAPTOP) == "laptop")

        def computer(n: int) -> str:
            position = model.position(f"{SELF}/run1/{n}")
            assert position is not None
            text: str = model.data(model.index(position, JobColumn.COMPUTER))
            return text

        assert [computer(n) for n in (1, 2, 3)] == [
            "workstation → gpu-box", "laptop", "laptop → gpu-box"]  # fmt: skip
        combo = page.filter_bar.node_combo
        assert [combo.itemText(i) for i in range(combo.count())] == [
            "All computers", "workstation (this computer)", "attic", "gpu-box", "laptop",
            OTHER[:8],
        ]  # fmt: skip
        combo.setCurrentIndex(combo.findData(LAPTOP))
        combo.activated.emit(combo.currentIndex())
        assert keys(page.filter_model) == [3, 2]
        assert page.count_label.text() == "2 of 4 jobs"
        combo.setCurrentIndex(combo.findData(SELF))
        combo.activated.emit(combo.currentIndex())
        assert keys(page.filter_model) == [4, 1]
        combo.setCurrentIndex(combo.findData(IDLE))
        combo.activated.emit(combo.currentIndex())
        assert page.body.currentWidget() is page.empty_state
        combo.setCurrentIndex(0)
        combo.activated.emit(0)
        assert keys(page.filter_model) == [4, 3, 2, 1]
    finally:
        for closing in (jobs, jobs_store, discovery, engines):
            await closing.close()


async def test_ctrl_f_puts_the_focus_in_the_search_field(
    qtbot: QtBot, controller: JobsController, settings: QSettings
) -> None:
    page = JobsPage(controller, settings)
    qtbot.addWidget(page)
    page.filter_bar.search_field.setText("qwen")
    page.show()
    qtbot.waitExposed(page)
    assert focus_search_of(page), "the Jobs page offers a search for Ctrl+F"
    await wait_until(page.filter_bar.search_field.hasFocus)
    assert page.filter_bar.search_field.selectedText() == "qwen"
