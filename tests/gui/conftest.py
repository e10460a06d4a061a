"""GUI tests: offscreen Qt, async tests on a qasync loop, no Qt warnings.

The leak guards for threads and child processes live in ``tests/conftest.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before any QApplication exists

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest
import qasync
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, QtMsgType
from PySide6.QtWidgets import QApplication

from tests.gui.helpers import FakeConnection
from tests.support.ports import free_port

# The offscreen platform reports what it cannot do; these are not bugs in the app.
_HARMLESS_QT_MESSAGES = ("This plugin does not support", "QSystemTrayIcon::setVisible")


def _qasync_loop() -> asyncio.AbstractEventLoop:
    app = QApplication.instance() or QApplication([])
    assert isinstance(app, QApplication)
    loop: asyncio.AbstractEventLoop = qasync.QEventLoop(app)
    return loop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, object]:
    """Run every async test of this folder on a qasync loop (asyncio on the Qt event loop)."""
    return {"qasync": _qasync_loop}


@pytest.fixture(autouse=True)
def _no_qt_warnings(qapp: QApplication, qtlog: object) -> Iterator[None]:
    """Fail a test on a Qt warning (other than the offscreen platform's own notes)."""
    yield
    records = getattr(qtlog, "records", [])
    warnings = [
        record.message
        for record in records
        if record.type != QtMsgType.QtDebugMsg
        and record.type != QtMsgType.QtInfoMsg
        and not record.message.startswith(_HARMLESS_QT_MESSAGES)
    ]
    assert not warnings, f"Qt warnings: {warnings}"


@pytest.fixture(autouse=True)
def _no_windows_left(qapp: QApplication) -> Iterator[None]:
    """Delete the top-level widgets a test leaves, and the Qt objects of its cyclic garbage,
    at its end. The application lives for the whole session: left alone, the windows stay until
    the worker exits (hundreds per worker, their timers included) and the garbage is destroyed
    at a random later point, by the collector in whatever test then runs, where a fault would
    be charged to that test instead of the one that made it."""
    before = set(qapp.topLevelWidgets())
    yield
    for widget in qapp.topLevelWidgets():
        if widget not in before:
            widget.deleteLater()
    # Deferred deletions are delivered when asked for by type, even with no event loop running.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    # What survived is moved out of the collector's sight, so the next test's collection walks
    # only what that test made: a full walk of a worker's heap (the client libraries' types,
    # every earlier test's survivors) took 2 s per test on a loaded full run.
    gc.freeze()


@pytest.fixture(autouse=True)
def _own_preferences(tmp_path_factory: pytest.TempPathFactory) -> None:
    """App preferences (QSettings, INI) go to a temporary folder, never the user's config."""
    folder = tmp_path_factory.mktemp("preferences")
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh node data directory."""
    path = tmp_path / "node"
    path.mkdir()
    return path


@pytest.fixture
def broker_args() -> tuple[str, ...]:
    """Port flags that keep a test broker off the default ports."""
    flags = ("--node-port", "--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
    return tuple(item for flag in flags for item in (flag, str(free_port())))


@pytest.fixture
async def connection() -> AsyncIterator[FakeConnection]:
    """A scripted broker connection, stopped after the test."""
    fake = FakeConnection()
    yield fake
    await fake.stop()
