"""The tray: icon state from the service, jobs and errors; the running count; engines on/off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pytestqt.qtbot import QtBot

from app.application import PairApplication
from app.broker.state import ServiceState
from app.controllers.activity import ActivityController, OverallStatus, count_active, overall_status
from app.controllers.components import ComponentsController
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.models.components import ComponentsModel
from app.models.errors import ErrorsModel
from app.options import AppOptions
from app.stores.settings import SettingsStore
from app.tray import Tray, TrayWatch, engine_label, jobs_text, status_icon
from backend.protocol import methods
from backend.protocol.errors import Conflict
from backend.protocol.types.engines import EngineStatus
from tests.gui.helpers import EngineEvents, FakeConnection, Stores, settle, wait_until


def job(key: str, state: str) -> dict[str, Any]:
    return {
        "key": key, "engine": "ollama", "model": "llama3.2", "origin": "n1", "run_id": "r",
        "state": state, "created_at": 1.0, "seq": 1,
    }  # fmt: skip


def upsert(seq: int, key: str, state: str) -> dict[str, Any]:
    return {"seq": seq, "event": "upsert", "key": key, "workload": job(key, state)}


def engine(name: str, state: str = "stopped", **extra: Any) -> dict[str, Any]:
    names = {"ollama": "Ollama", "lmstudio": "LM Studio", "llamacpp": "llama.cpp (llama-server)"}
    return {
        "engine": name, "display_name": names[name], "front_door": "ollama", "mode": "process",
        "installed": state != "not-installed", "state": state, "port": 11435,
        "default_port": 11435, **extra,
    }  # fmt: skip


def error(error_id: str, severity: str) -> dict[str, Any]:
    return {"id": error_id, "node_id": "n1", "message": "m", "severity": severity,
            "created_at": 1.0, "updated_at": 1.0}  # fmt: skip


@dataclass
class TrayUi:
    connection: FakeConnection
    activity: ActivityController
    tray: Tray
    engines: EngineEvents


@pytest.fixture
async def ui(qtbot: QtBot, tmp_path: Path) -> AsyncIterator[TrayUi]:
    connection = FakeConnection()
    stores = Stores.build(connection)
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, tmp_path, lambda _url: True)
    components = ComponentsController(connection, ComponentsModel(), stores.components)
    errors = ErrorsController(connection, ErrorsModel(), components)
    activity = ActivityController(connection, errors.model, stores.jobs, stores.engines)
    tray = Tray(connection, service, activity)
    yield TrayUi(connection, activity, tray, EngineEvents(connection))
    for controller in (activity, errors, components, service):
        await controller.close()
    await stores.close()
    await settings.close()
    await connection.stop()


async def ready(ui: TrayUi, jobs: list[dict[str, Any]], engines: list[dict[str, Any]]) -> None:
    ui.connection.script(methods.JOBS_SUBSCRIBE, {"seq": 10, "workloads": jobs})
    ui.engines.script(*engines)
    ui.connection.become_ready()
    await wait_until(lambda: ui.activity.jobs_known, 5, "the jobs snapshot")
    await settle()


def test_overall_status_ranks_failure_errors_work_and_idle() -> None:
    ready_ = ServiceState.READY
    assert overall_status(ready_, 0, False) is OverallStatus.READY
    assert overall_status(ready_, 2, False) is OverallStatus.WORKING
    assert overall_status(ready_, 2, True) is OverallStatus.ERROR
    assert overall_status(ServiceState.FAILED, 0, False) is OverallStatus.ERROR
    assert overall_status(ServiceState.DISCONNECTED, 3, True) is OverallStatus.STOPPED
    assert overall_status(ServiceState.CONNECTING, 0, False) is OverallStatus.CONNECTING
    assert count_active({"a": "in_flight", "b": "running", "c": "completed", "d": "failed"}) == 2
    assert [jobs_text(n) for n in (0, 1, 4)] == [
        "No jobs running",
        "1 job running",
        "4 jobs running",
    ]


def test_engine_labels_say_what_is_going_on() -> None:
    def status(**extra: Any) -> EngineStatus:
        return msgspec.convert(engine("ollama") | extra, EngineStatus)

    assert engine_label(status(), busy=False) == "Ollama"
    assert engine_label(status(), busy=True) == "Ollama (starting…)"
    assert engine_label(status(state="running"), busy=True) == "Ollama (stopping…)"
    assert engine_label(status(state="running", adopted=True), busy=False) == (
        "Ollama (started outside PAIR)"
    )
    assert engine_label(status(state="error"), busy=False) == "Ollama (failed)"


def test_every_status_has_a_distinct_icon() -> None:
    keys = set()
    for state, status in [
        (ServiceState.READY, OverallStatus.READY),
        (ServiceState.READY, OverallStatus.WORKING),
        (ServiceState.READY, OverallStatus.ERROR),
        (ServiceState.FAILED, OverallStatus.ERROR),
        (ServiceState.DISCONNECTED, OverallStatus.STOPPED),
    ]:
        image = status_icon(state, status).pixmap(22, 22).toImage()
        assert not image.isNull()
        keys.add(bytes(image.constBits()))  # type: ignore[call-overload]
    assert len(keys) == 5


async def test_icon_and_running_count_follow_job_pushes(ui: TrayUi) -> None:
    tray = ui.tray
    assert tray.status is OverallStatus.CONNECTING
    assert not tray.jobs_action.isVisible()
    await ready(ui, [job("a", "running"), job("old", "completed")], [])
    assert tray.status is OverallStatus.WORKING
    assert tray.jobs_action.text() == "1 job running"
    assert tray.icon.toolTip() == "PAIR service: Ready\n1 job running"
    working_icon = tray.icon.icon().cacheKey()
    ui.connection.push(methods.JOBS_EVENT, upsert(11, "b", "in_flight"))
    assert tray.jobs_action.text() == "2 jobs running"
    ui.connection.push(methods.JOBS_EVENT, upsert(12, "a", "completed"))
    ui.connection.push(methods.JOBS_EVENT, {"seq": 13, "event": "remove", "key": "b"})
    assert tray.jobs_action.text() == "No jobs running"
    assert tray.status is OverallStatus.READY
    assert tray.icon.icon().cacheKey() != working_icon
    ui.connection.push(methods.JOBS_EVENT, upsert(13, "c", "running"))  # already applied
    assert tray.jobs_action.text() == "No jobs running"


async def test_a_gap_in_job_events_subscribes_again(ui: TrayUi) -> None:
    await ready(ui, [], [])
    ui.connection.script(methods.JOBS_SUBSCRIBE, {"seq": 20, "workloads": [job("x", "running")]})
    ui.connection.push(methods.JOBS_EVENT, upsert(15, "lost", "running"))
    await wait_until(lambda: ui.tray.jobs_action.text() == "1 job running", 5, "the new snapshot")
    subscribes = [m for m, _ in ui.connection.calls if m == methods.JOBS_SUBSCRIBE.name]
    assert len(subscribes) == 2


async def test_errors_turn_the_icon_red_and_a_failed_service_too(ui: TrayUi) -> None:
    await ready(ui, [job("a", "running")], [])
    ui.connection.push(methods.ERRORS_UPDATE, [error("w", "warning")])
    assert ui.tray.status is OverallStatus.WORKING  # a warning is not an error
    ui.connection.push(methods.ERRORS_UPDATE, [error("e", "error")])
    assert ui.tray.status is OverallStatus.ERROR
    assert "an error needs attention" in ui.tray.icon.toolTip()
    ui.connection.push(methods.ERRORS_UPDATE, [])
    assert ui.tray.status is OverallStatus.WORKING
    ui.connection.lose_session(ServiceState.FAILED)
    assert ui.tray.status is OverallStatus.ERROR
    assert ui.tray.start_action.isVisible()
    assert not ui.tray.jobs_action.isVisible()
    assert ui.tray.engine_actions == {}
    ui.connection.lose_session(ServiceState.DISCONNECTED)
    assert ui.tray.status is OverallStatus.STOPPED


async def test_one_checkable_action_per_installed_engine(ui: TrayUi) -> None:
    await ready(
        ui,
        [],
        [engine("llamacpp", "not-installed"), engine("lmstudio"), engine("ollama", "running")],
    )
    actions = ui.tray.engine_actions
    assert list(actions) == ["ollama", "lmstudio"]
    assert actions["ollama"].isChecked() and actions["ollama"].isEnabled()
    assert not actions["lmstudio"].isChecked()
    assert ui.tray.engines_header.isVisible()
    assert not ui.tray.no_engines_action.isVisible()
    ui.engines.state(engine("lmstudio", "running", adopted=True))
    assert actions["lmstudio"].isChecked()
    assert not actions["lmstudio"].isEnabled()  # PAIR will not stop what it did not start
    assert actions["lmstudio"].text() == "LM Studio (started outside PAIR)"


async def test_toggling_an_engine_calls_start_and_stop(ui: TrayUi) -> None:
    await ready(ui, [], [engine("ollama")])
    action = ui.tray.engine_actions["ollama"]
    started = asyncio.get_running_loop().create_future()
    ui.connection.script(methods.ENGINE_START, started)
    action.trigger()  # checks it
    assert not action.isEnabled()  # until the broker answers
    assert action.text() == "Ollama (starting…)"
    await settle()
    ui.engines.state(engine("ollama", "starting"))
    ui.engines.state(engine("ollama", "running"))  # the outcome comes before the answer
    assert not action.isEnabled()
    started.set_result(engine("ollama", "running"))
    await wait_until(lambda: action.isEnabled(), 5, "the start to finish")
    assert (methods.ENGINE_START.name, {"engine": "ollama"}) in ui.connection.calls
    assert action.isChecked()
    ui.connection.script(methods.ENGINE_STOP, engine("ollama", "stopped"))
    action.trigger()
    ui.engines.state(engine("ollama", "stopped"))
    await wait_until(lambda: action.isEnabled(), 5, "the stop to finish")
    assert (methods.ENGINE_STOP.name, {"engine": "ollama"}) in ui.connection.calls
    assert not action.isChecked()


async def test_a_refused_toggle_reports_and_shows_the_truth(ui: TrayUi) -> None:
    await ready(ui, [], [engine("ollama", "running")])
    action = ui.tray.engine_actions["ollama"]
    ui.connection.script(methods.ENGINE_STOP, Conflict("Ollama was not started by PAIR"))
    failures: list[str] = []
    ui.activity.command_failed.connect(failures.append)
    action.trigger()
    assert action.text() == "Ollama (stopping…)"
    await wait_until(lambda: bool(failures), 5, "the failure")
    assert failures == ["Could not stop Ollama: Ollama was not started by PAIR"]
    assert action.isChecked() and action.isEnabled()


async def test_no_installed_engines_says_so(ui: TrayUi) -> None:
    await ready(ui, [], [engine("ollama", "not-installed")])
    assert ui.tray.engine_actions == {}
    assert ui.tray.no_engines_action.isVisible()


async def test_menu_entries_emit_their_requests(qtbot: QtBot, ui: TrayUi) -> None:
    for action, signal in [
        (ui.tray.endpoints_action, ui.tray.endpoints_requested),
        (ui.tray.show_action, ui.tray.show_requested),
        (ui.tray.quit_action, ui.tray.quit_requested),
    ]:
        with qtbot.waitSignal(signal):
            action.trigger()


async def test_the_tray_watch_reports_a_tray_that_appears_later(qtbot: QtBot) -> None:
    answers = [False, False, True]
    asked: list[bool] = []

    def available() -> bool:
        asked.append(answers[len(asked)] if len(asked) < len(answers) else True)
        return asked[-1]

    watch = TrayWatch(available, interval_ms=10)
    with qtbot.waitSignal(watch.appeared, timeout=5000):
        watch.start()
    assert asked == [False, False, True] and not watch.watching


async def test_the_app_adds_the_tray_when_the_desktop_gets_one(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[Tray] = []
    # Offscreen has no tray to show an icon in (Qt warns); the test sees the app show it.
    monkeypatch.setattr(Tray, "show", lambda tray: shown.append(tray))
    has_tray = False
    app = PairApplication(
        AppOptions(tmp_path / "node"), tray_check=lambda: has_tray, open_url=lambda _u: True
    )
    try:
        assert app.tray is None and not app.window.hide_on_close
        assert app.tray_watch is not None
        has_tray = True
        app.tray_watch.appeared.emit()
        assert app.tray is not None and app.window.hide_on_close  # closing now hides
        assert shown == [app.tray]
        assert app.general_settings.startup_box.tray_check.isEnabled()
        with qtbot.waitSignal(app.tray.show_requested, timeout=1000):
            app.tray.show_action.trigger()
    finally:
        await app.shutdown()


async def test_an_app_told_not_to_use_a_tray_does_not_watch_for_one(tmp_path: Path) -> None:
    app = PairApplication(AppOptions(tmp_path / "node"), use_tray=False, open_url=lambda _u: True)
    try:
        assert app.tray is None and app.tray_watch is None
    finally:
        await app.shutdown()
