"""Controllers against a scripted connection: snapshots, numbered events, gaps, diffs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QUrl
from pytestqt.qtbot import QtBot

from app.broker.state import Ownership, ServiceState
from app.controllers.components import ComponentsController
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.models.components import ComponentsModel
from app.models.errors import ErrorsModel
from app.stores.components import ComponentsStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import Unavailable
from tests.gui.helpers import FakeConnection, settle, wait_until


def component(name: str, status: str = "running", restarts: int = 0) -> dict[str, Any]:
    return {"name": name, "kind": "task", "status": status, "restarts": restarts, "since": 1.0}


def error(error_id: str, message: str = "broken", **extra: Any) -> dict[str, Any]:
    return {
        "id": error_id, "node_id": "n1", "message": message, "severity": "error",
        "created_at": 1.0, "updated_at": 1.0, **extra,
    }  # fmt: skip


def event(seq: int, comp: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "event": "component_changed", "component": comp}


@pytest.fixture
async def components(connection: FakeConnection) -> AsyncIterator[ComponentsController]:
    store = ComponentsStore(connection)
    controller = ComponentsController(connection, ComponentsModel(), store)
    yield controller
    await controller.close()
    await store.close()


async def test_snapshot_then_events_update_rows_without_reset(
    qtbot: QtBot, connection: FakeConnection, components: ComponentsController
) -> None:
    model = components.model
    connection.script(methods.COMPONENTS_SUBSCRIBE, {"seq": 5, "components": [
        component("control"), component("proxy", "starting")]})  # fmt: skip
    connection.become_ready()
    await wait_until(lambda: model.rowCount() == 2)
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.dataChanged) as sig:
        connection.push(methods.COMPONENTS_EVENT, event(6, component("proxy", "running")))
    assert sig.args[0].row() == 1
    assert model.get("proxy") is not None
    assert model.get("proxy") == model.row_at(1)
    assert model.row_at(1).status == "running"
    with qtbot.assertNotEmitted(model.dataChanged):
        connection.push(methods.COMPONENTS_EVENT, event(6, component("proxy", "failed")))
    with qtbot.waitSignal(model.rowsInserted):
        connection.push(methods.COMPONENTS_EVENT, event(7, component("engines", "backoff")))
    assert [c.name for c in model.rows()] == ["control", "proxy", "engines"]


async def test_a_gap_subscribes_again(
    connection: FakeConnection, components: ComponentsController
) -> None:
    connection.script(
        methods.COMPONENTS_SUBSCRIBE,
        {"seq": 1, "components": [component("control")]},
        {"seq": 9, "components": [component("control", "backoff", 2)]},
    )
    connection.become_ready()
    await wait_until(lambda: components.model.rowCount() == 1)
    connection.push(methods.COMPONENTS_EVENT, event(3, component("control", "failed")))
    await wait_until(lambda: components.model.row_at(0).restarts == 2)
    assert [call[0] for call in connection.calls].count(methods.COMPONENTS_SUBSCRIBE.name) == 2
    assert components.model.row_at(0).status == "backoff"


async def test_events_that_overtake_the_snapshot_apply_after_it(
    connection: FakeConnection, components: ComponentsController
) -> None:
    snapshot: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.COMPONENTS_SUBSCRIBE, snapshot)
    connection.become_ready()
    await settle()
    connection.push(methods.COMPONENTS_EVENT, event(4, component("control", "failed")))
    connection.push(methods.COMPONENTS_EVENT, event(5, component("control", "running", 1)))
    snapshot.set_result({"seq": 4, "components": [component("control", "failed")]})
    await wait_until(lambda: components.model.rowCount() == 1)
    await settle()
    assert components.model.row_at(0).restarts == 1  # event 4 skipped, event 5 applied


async def test_session_end_clears_the_components(
    connection: FakeConnection, components: ComponentsController
) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, {"seq": 1, "components": [component("a")]})
    connection.become_ready()
    await wait_until(lambda: components.model.rowCount() == 1)
    connection.lose_session()
    assert components.model.rowCount() == 0


async def test_errors_snapshots_become_row_changes(
    qtbot: QtBot, connection: FakeConnection, components: ComponentsController
) -> None:
    model = ErrorsModel()
    errors = ErrorsController(connection, model, components)
    connection.script(methods.ERRORS_GET_INITIAL, [error("a"), error("b")])
    connection.become_ready()
    await wait_until(lambda: model.rowCount() == 2)
    with (
        qtbot.assertNotEmitted(model.modelReset),
        qtbot.waitSignals([model.rowsRemoved, model.dataChanged, model.rowsInserted]),
    ):
        connection.push(methods.ERRORS_UPDATE, [error("b", "worse"), error("c")])
    assert [(e.id, e.message) for e in model.rows()] == [("b", "worse"), ("c", "broken")]
    await errors.close()


async def test_a_push_newer_than_the_initial_read_wins(
    connection: FakeConnection, components: ComponentsController
) -> None:
    model = ErrorsModel()
    errors = ErrorsController(connection, model, components)
    initial: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.ERRORS_GET_INITIAL, initial)
    connection.become_ready()
    await settle()
    connection.push(methods.ERRORS_UPDATE, [error("new")])
    initial.set_result([error("old")])
    await settle()
    assert [e.id for e in model.rows()] == ["new"]
    await errors.close()


async def test_error_actions_call_the_broker(
    connection: FakeConnection, components: ComponentsController
) -> None:
    model = ErrorsModel()
    errors = ErrorsController(connection, model, components)
    connection.push(methods.ERRORS_UPDATE, [
        error("supervisor:crashed:proxy", action={"kind": "restart-component",
                                                   "label": "Restart", "target": "proxy"}),
        error("plain"),
    ])  # fmt: skip
    crashed, plain = model.rows()
    errors.run_action(crashed)
    errors.run_action(plain)
    await settle()
    assert (methods.COMPONENTS_RESTART.name, {"name": "proxy"}) in connection.calls
    assert (methods.ERRORS_CLEAR.name, {"id": "plain", "node_id": "n1"}) in connection.calls
    await errors.close()


async def test_service_controller_reads_facts_and_follows_pushes(
    qtbot: QtBot, connection: FakeConnection, tmp_path: Path
) -> None:
    opened: list[QUrl] = []
    settings = SettingsStore(connection)
    service = ServiceController(
        connection, settings, tmp_path, lambda url: opened.append(url) or True
    )
    connection.script(methods.VERSION, {"version": "9.9", "protocol": 1, "python": "3",
                                        "platform": "x"})  # fmt: skip
    connection.script(methods.SETTINGS_GET, {"values": {"log_level": "info"}, "schema": []})
    connection.become_ready(Ownership.ATTACHED)
    await wait_until(lambda: service.info.log_level == "info")
    assert service.info.broker_version == "9.9"
    assert ("PAIR service", "9.9") in service.versions()
    with qtbot.waitSignal(service.info_changed):
        connection.push(methods.SETTINGS_CHANGED, {"values": {"log_level": "debug"}, "schema": []})
    assert service.info.log_level == "debug"
    connection.script(methods.LOG_SET_LEVEL, {"level": "error"})
    service.set_log_level("error")
    await wait_until(lambda: service.info.log_level == "error")
    assert (methods.LOG_SET_LEVEL.name, {"level": "error"}) in connection.calls
    service.open_log_folder()
    assert opened == [QUrl.fromLocalFile(str(tmp_path / "logs"))]
    await service.close()
    await settings.close()


async def test_a_failed_command_is_reported(
    qtbot: QtBot, connection: FakeConnection, tmp_path: Path
) -> None:
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, tmp_path)
    connection.script(methods.LOG_SET_LEVEL, Unavailable("settings component is down"))
    with qtbot.waitSignal(service.command_failed) as failed:
        service.set_log_level("debug")
        await wait_until(lambda: not service._tasks)
    assert "settings component is down" in failed.args[0]
    await service.close()
    await settings.close()


async def test_fake_connection_states(connection: FakeConnection) -> None:
    connection.become_ready()
    assert connection.state is ServiceState.READY
    connection.lose_session(ServiceState.FAILED)
    assert connection.state is ServiceState.FAILED
