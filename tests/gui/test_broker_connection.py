"""The app against the real broker: spawn, attach, crash recovery, the restart budget, quit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psutil
import pytest

from app.application import PairApplication
from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.state import Ownership, ServiceState
from app.options import AppOptions
from backend.protocol.endpoint import control_address, open_control_connection
from tests.gui.helpers import wait_until

AppFactory = Callable[[], PairApplication]
READY_TIMEOUT = 60.0


def pid_gone(pid: int) -> bool:
    """True when no process ``pid`` runs any more (a zombie counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class StateLog:
    """Every state an app's connection went through, starting with its initial one."""

    def __init__(self, app: PairApplication) -> None:
        self.states = [app.connection.state]
        app.connection.state_changed.connect(self.states.append)


@pytest.fixture
async def make_app(data_dir: Path, broker_args: tuple[str, ...]) -> AsyncIterator[AppFactory]:
    """Build started apps for the test's data dir; shut each down afterwards."""
    apps: list[PairApplication] = []

    def factory() -> PairApplication:
        options = AppOptions(data_dir, broker_args)
        app = PairApplication(options, use_tray=False, open_url=lambda _url: True)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        await app.shutdown()


def start_external_broker(data_dir: Path, broker_args: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """A broker started the way a user or a system service would (``pair node``)."""
    command = [sys.executable, "-m", "backend", "node", "--data-dir", str(data_dir), *broker_args]
    with (data_dir.parent / "external-broker.log").open("ab") as log:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)


@pytest.fixture
def external_broker(
    data_dir: Path, broker_args: tuple[str, ...]
) -> Iterator[subprocess.Popen[bytes]]:
    """An external broker for the test's data dir, stopped by PID afterwards."""
    process = start_external_broker(data_dir, broker_args)
    try:
        yield process
    finally:
        stop_by_pid(process)


def stop_by_pid(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s; only this PID."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_for_control_socket(data_dir: Path) -> None:
    """Until the broker of ``data_dir`` accepts connections on its control socket."""

    async with asyncio.timeout(READY_TIMEOUT):
        while True:
            try:
                _, writer = await open_control_connection(control_address(data_dir))
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def wait_for_ready(app: PairApplication, *, other_than: int | None = None) -> int:
    """Until the app is ready on a broker (a new one if ``other_than``); return its PID."""

    def ready() -> bool:
        connection = app.connection
        return connection.state is ServiceState.READY and connection.pid not in (None, other_than)

    await wait_until(ready, READY_TIMEOUT, "the service to be ready")
    pid = app.connection.pid
    assert pid is not None
    return pid


async def test_spawns_a_broker_and_quitting_stops_it(make_app: AppFactory) -> None:
    app = make_app()
    log = StateLog(app)
    app.start()
    pid = await wait_for_ready(app)
    assert log.states == [ServiceState.CONNECTING, ServiceState.READY]
    assert app.connection.ownership is Ownership.OWNED
    if sys.platform != "win32":  # a session of its own (app/broker/process.py)
        assert os.getsid(pid) == pid != os.getsid(0)
    await wait_until(lambda: app.components.rowCount() > 0, what="the components snapshot")
    await wait_until(lambda: app.service.info.broker_version is not None, what="version")
    await app.shutdown()
    await wait_until(lambda: pid_gone(pid), 10.0, "the owned broker to exit")


async def test_attaches_to_a_running_broker_and_leaves_it_running(
    make_app: AppFactory, external_broker: subprocess.Popen[bytes], data_dir: Path
) -> None:
    await wait_for_control_socket(data_dir)
    app = make_app()
    app.start()
    pid = await wait_for_ready(app)
    assert pid == external_broker.pid
    assert app.connection.ownership is Ownership.ATTACHED
    assert app.window.service_page.status_box.restart_button.text() == "Reconnect"
    await app.shutdown()
    await asyncio.sleep(1.0)
    assert external_broker.poll() is None, "quitting the app stopped a broker it did not start"
    await wait_for_control_socket(data_dir)


async def test_an_attached_broker_that_goes_away_is_reattached_when_back(
    make_app: AppFactory, data_dir: Path, broker_args: tuple[str, ...]
) -> None:
    first = start_external_broker(data_dir, broker_args)
    second: subprocess.Popen[bytes] | None = None
    try:
        await wait_for_control_socket(data_dir)
        app = make_app()
        app.start()
        await wait_for_ready(app)
        stop_by_pid(first)
        await wait_until(lambda: app.connection.state is ServiceState.DISCONNECTED)
        status_box = app.window.service_page.status_box
        assert not status_box.start_button.isHidden()
        assert app.window.service_notice.isVisibleTo(app.window)
        second = start_external_broker(data_dir, broker_args)
        pid = await wait_for_ready(app, other_than=first.pid)
        assert pid == second.pid
        assert app.connection.ownership is Ownership.ATTACHED
    finally:
        stop_by_pid(first)
        if second is not None:
            stop_by_pid(second)


async def test_a_crashed_owned_broker_is_restarted(make_app: AppFactory) -> None:
    app = make_app()
    app.start()
    first = await wait_for_ready(app)
    log = StateLog(app)
    os.kill(first, signal.SIGKILL)
    second = await wait_for_ready(app, other_than=first)
    assert app.connection.ownership is Ownership.OWNED
    assert log.states == [ServiceState.READY, ServiceState.CONNECTING, ServiceState.READY]
    assert pid_gone(first)
    assert not pid_gone(second)


async def test_four_crashes_within_a_minute_fail_and_start_recovers(make_app: AppFactory) -> None:
    app = make_app()
    app.start()
    status_box = app.window.service_page.status_box
    pid = await wait_for_ready(app)
    for _ in range(3):
        os.kill(pid, signal.SIGKILL)
        pid = await wait_for_ready(app, other_than=pid)
    os.kill(pid, signal.SIGKILL)
    await wait_until(lambda: app.connection.state is ServiceState.FAILED, what="failed")
    assert app.connection.ownership is None
    assert not status_box.start_button.isHidden()
    assert status_box.restart_button.isHidden()
    assert app.window.service_notice.isVisibleTo(app.window)
    status_box.start_button.click()
    new_pid = await wait_for_ready(app, other_than=pid)
    assert app.connection.ownership is Ownership.OWNED
    assert status_box.start_button.isHidden()
    await app.shutdown()
    await wait_until(lambda: pid_gone(new_pid), 10.0, "the owned broker to exit")


async def test_restart_replaces_an_owned_broker(make_app: AppFactory) -> None:
    app = make_app()
    app.start()
    first = await wait_for_ready(app)
    app.window.service_page.status_box.restart_button.click()
    second = await wait_for_ready(app, other_than=first)
    assert pid_gone(first)
    assert app.connection.ownership is Ownership.OWNED
    assert second != first


async def test_two_apps_for_one_data_dir_share_one_broker(make_app: AppFactory) -> None:
    apps = [make_app(), make_app()]
    for app in apps:
        app.start()
    pids = {await wait_for_ready(app) for app in apps}
    assert len(pids) == 1
    assert sorted(app.connection.ownership or "" for app in apps) == ["attached", "owned"]


async def test_the_service_page_follows_the_live_broker(make_app: AppFactory) -> None:
    app = make_app()
    app.start()
    await wait_for_ready(app)
    page = app.window.service_page
    await wait_until(lambda: page.logging_box.level_combo.currentData() == "info", what="level")
    page.logging_box.level_combo.setCurrentIndex(page.logging_box.level_combo.findData("debug"))
    page.logging_box.level_combo.activated.emit(page.logging_box.level_combo.currentIndex())
    await wait_until(lambda: app.service.info.log_level == "debug", what="the new level")
    assert page.versions_box.values["PAIR service"].text() == app.service.info.broker_version
    assert page.components_table.model().rowCount() == app.components.rowCount() > 0
    with contextlib.suppress(Exception):
        page.logging_box.open_button.click()  # the fake opener only records nothing


async def test_a_spawned_broker_that_finds_another_one_running_leads_to_attaching(
    data_dir: Path, broker_args: tuple[str, ...]
) -> None:
    flag = data_dir.parent / "go"
    fake = data_dir.parent / "fake-python"
    # Stands in for a broker that lost the race for the data dir: it exits with code 3.
    fake.write_text(f"#!/bin/sh\nwhile [ ! -e {flag} ]; do sleep 0.05; done\nexit 3\n")
    fake.chmod(0o755)
    connection = BrokerConnection(BrokerLaunch(data_dir, python=str(fake)))
    connection.start()
    external = None
    try:
        await wait_until(lambda: connection.ownership is Ownership.OWNED, what="the spawn")
        external = start_external_broker(data_dir, broker_args)
        await wait_for_control_socket(data_dir)
        flag.touch()
        await wait_until(lambda: connection.ownership is Ownership.ATTACHED, READY_TIMEOUT)
        await wait_until(lambda: connection.state is ServiceState.READY)
        assert connection.pid == external.pid
    finally:
        await connection.stop()
        if external is not None:
            assert external.poll() is None, "leaving must not stop an attached broker"
            stop_by_pid(external)
