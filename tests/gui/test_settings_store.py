"""The settings store against a scripted connection: the snapshot, a push applied, a lost push
read again, a read a push overtook, the session's end, and controllers sharing one store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.controllers.endpoints import FrontDoorSettingsController
from app.controllers.service import ServiceController
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import Unavailable
from tests.gui.helpers import FakeConnection, settle, wait_until

SCHEMA = [{"key": "log_level", "type": "string", "default": "info", "description": "level"}]


def settings(**values: Any) -> dict[str, Any]:
    return {"values": values, "schema": SCHEMA}


@pytest.fixture
async def store(connection: FakeConnection) -> AsyncIterator[SettingsStore]:
    built = SettingsStore(connection)
    yield built
    await built.close()


async def test_the_snapshot_is_read_once_a_session_is_ready(
    connection: FakeConnection, store: SettingsStore
) -> None:
    assert store.snapshot is None and store.value("log_level") is None
    changes: list[int] = []
    store.changed.connect(lambda: changes.append(store.seq))
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    connection.become_ready()
    await wait_until(lambda: changes == [1])
    assert store.value("log_level") == "info"
    assert store.spec("log_level") is not None and store.spec("missing") is None
    assert len(connection.called(methods.SETTINGS_GET)) == 1


async def test_a_push_replaces_the_settings(
    qtbot: QtBot, connection: FakeConnection, store: SettingsStore
) -> None:
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    connection.become_ready()
    await wait_until(lambda: store.snapshot is not None)
    seq = store.seq
    with qtbot.waitSignals([store.changed, store.pushed]):
        connection.push(methods.SETTINGS_CHANGED, settings(log_level="debug"))
    assert store.value("log_level") == "debug"
    assert store.seq == seq + 1
    assert len(connection.called(methods.SETTINGS_GET)) == 1


async def test_a_push_that_cannot_be_read_makes_the_store_read_again(
    qtbot: QtBot, connection: FakeConnection, store: SettingsStore
) -> None:
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    connection.become_ready()
    await wait_until(lambda: store.snapshot is not None)
    connection.script(methods.SETTINGS_GET, settings(log_level="error"))
    with qtbot.waitSignal(store.pushed):
        connection.push(methods.SETTINGS_CHANGED, {"values": "not a mapping"})
    await wait_until(lambda: store.value("log_level") == "error")
    assert len(connection.called(methods.SETTINGS_GET)) == 2


async def test_a_read_that_a_push_overtook_is_dropped(
    connection: FakeConnection, store: SettingsStore
) -> None:
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.script(methods.SETTINGS_GET, answer)
    connection.become_ready()
    await settle()
    connection.push(methods.SETTINGS_CHANGED, settings(log_level="debug"))
    answer.set_result(settings(log_level="info"))  # read before the change was made
    await settle()
    assert store.value("log_level") == "debug"


async def test_a_failed_read_is_reported_and_the_session_end_forgets(
    qtbot: QtBot, connection: FakeConnection, store: SettingsStore
) -> None:
    failures: list[str] = []
    store.failed.connect(failures.append)
    connection.script(methods.SETTINGS_GET, Unavailable("settings component is down"))
    connection.become_ready()
    await wait_until(lambda: store.error is not None)
    assert "down" in store.error and failures == [store.error]
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    store.reread()
    await wait_until(lambda: store.snapshot is not None)
    assert store.error is None
    with qtbot.waitSignal(store.changed):
        connection.lose_session()
    assert store.snapshot is None


async def test_a_save_applies_the_answer(connection: FakeConnection, store: SettingsStore) -> None:
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    connection.become_ready()
    await wait_until(lambda: store.snapshot is not None)
    connection.script(methods.SETTINGS_SET, settings(log_level="warning"))
    await store.save({"log_level": "warning"})
    assert store.value("log_level") == "warning"
    assert connection.called(methods.SETTINGS_SET) == [{"values": {"log_level": "warning"}}]


async def test_controllers_share_one_read_and_see_a_change(
    qtbot: QtBot, connection: FakeConnection, store: SettingsStore, tmp_path: Path
) -> None:
    service = ServiceController(connection, store, tmp_path, lambda _url: True)
    front_doors = FrontDoorSettingsController(connection, store)
    connection.script(methods.SETTINGS_GET, settings(log_level="info"))
    connection.become_ready()
    await wait_until(lambda: service.info.log_level == "info")
    assert front_doors.value("log_level") == "info"
    with qtbot.waitSignals([service.info_changed, front_doors.changed]):
        connection.push(methods.SETTINGS_CHANGED, settings(log_level="debug"))
    assert service.info.log_level == "debug"
    assert front_doors.value("log_level") == "debug"
    assert len(connection.called(methods.SETTINGS_GET)) == 1
    await service.close()
    await front_doors.close()
