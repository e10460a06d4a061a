"""The Service page's controller: broker facts (version, PID, uptime, log level) and commands."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import msgspec
from msgspec.structs import replace
from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QDesktopServices

from app import versions
from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode_push
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.contract import Method, NoParams
from backend.protocol.endpoint import log_dir
from backend.protocol.errors import RpcError
from backend.protocol.types.broker import LOG_LEVELS, LogLevel, LogLevelParams
from backend.protocol.types.settings import SettingsSnapshot

log = logging.getLogger(__name__)
T = TypeVar("T")
LOG_LEVEL_SETTING = "log_level"
UrlOpener = Callable[[QUrl], bool]
# ``pair demo`` sets it for the app it starts: the demo's service is not the user's own.
DEMO_VARIABLE = "PAIR_DEMO"
LOG_FILES = {"service": "broker.log", "app": "app.log"}
TAIL_BYTES = 256 * 1024
TAIL_LINES = 1000


def running_in_demo(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this app was started by ``pair demo``."""
    return environ.get(DEMO_VARIABLE) == "1"


def read_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of the text file ``path`` (blocking: run it in a thread);
    raises OSError when it cannot be read."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - TAIL_BYTES))
        data = file.read()
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > TAIL_BYTES and text:
        text = text[1:]  # the first line was cut by the seek
    return text[-lines:]


class ServiceInfo(msgspec.Struct, frozen=True):
    """What the broker told us about itself in this session (None: not known yet)."""

    broker_version: str | None = None
    broker_commit: str | None = None  # from ``version``; None when the broker does not know it
    node_name: str | None = None
    pid: int | None = None
    uptime_ms: int | None = None
    uptime_read_at: float = 0.0  # time.monotonic() when uptime_ms was read
    log_level: LogLevel | None = None

    def uptime_s(self, now: float) -> float | None:
        """Seconds the broker has been up at monotonic time ``now``."""
        if self.uptime_ms is None:
            return None
        return self.uptime_ms / 1000 + max(0.0, now - self.uptime_read_at)


def log_level_of(settings: SettingsSnapshot) -> LogLevel | None:
    """The ``log_level`` setting when it holds a known level."""
    value = settings.values.get(LOG_LEVEL_SETTING)
    return next((level for level in LOG_LEVELS if level == value), None)


class ServiceController(Controller):
    """Reads ``version`` and ``status`` per session, follows ``app:ready`` and the settings
    store's log level, and runs the service commands. Owns the refresh and command tasks."""

    info_changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        settings: SettingsStore,
        data_dir: Path,
        open_url: UrlOpener = QDesktopServices.openUrl,
        parent: QObject | None = None,
        *,
        demo: bool | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.data_dir = data_dir
        self.demo = running_in_demo() if demo is None else demo
        self._open_url = open_url
        self._info = ServiceInfo()
        self._settings = settings
        settings.changed.connect(self._on_settings_changed)

    @property
    def info(self) -> ServiceInfo:
        """The latest facts."""
        return self._info

    @property
    def log_dir(self) -> Path:
        """The node's log folder."""
        return log_dir(self.data_dir)

    def versions(self) -> list[tuple[str, str]]:
        """(label, version) rows: this app, the broker, Python, Qt."""
        return [
            ("PAIR app", versions.app_version()),
            ("PAIR service", self._info.broker_version or "unknown (not connected)"),
            ("Python", versions.python_version()),
            ("Qt", versions.qt_version()),
        ]

    def start_service(self) -> None:
        """Start (or attach to) the broker after a failure or disconnect."""
        self.connection.request_start()

    def restart_service(self) -> None:
        """Owned broker: stop and start it. Attached broker: reconnect."""
        self.connection.request_restart()

    def set_log_level(self, level: LogLevel) -> None:
        """Change the broker's log level (saved as the ``log_level`` setting)."""
        if level != self._info.log_level:
            self.run_command(self._set_log_level(level), what="change the log level")

    def open_log_folder(self) -> None:
        """Show the log folder in the desktop's file manager."""
        folder = self.log_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.command_failed.emit(f"Could not create the log folder {folder}: {exc}")
            return
        if not self._open_url(QUrl.fromLocalFile(str(folder))):
            self.command_failed.emit(f"Could not open the log folder {folder}")

    def log_path(self, which: str) -> Path:
        """The file of the ``which`` log (``service`` or ``app``)."""
        return self.log_dir / LOG_FILES[which]

    async def read_log(self, which: str) -> list[str]:
        """The last lines of the ``which`` log (``service`` or ``app``); raises OSError with
        the reason when the file cannot be read."""
        return await asyncio.to_thread(read_tail, self.log_path(which))

    def _set_info(self, updated: ServiceInfo) -> None:
        if updated != self._info:
            self._info = updated
            self.info_changed.emit()

    async def _set_log_level(self, level: LogLevel) -> None:
        result = await self.connection.call(methods.LOG_SET_LEVEL, LogLevelParams(level=level))
        self._set_info(replace(self._info, log_level=result.level))

    def _on_connection_session_ready(self) -> None:
        self._tasks.spawn(self._refresh(), name="refresh")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._set_info(replace(self._info, pid=None, uptime_ms=None, node_name=None))
        elif self.connection.pid is not None:
            self._set_info(replace(self._info, pid=self.connection.pid))

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.APP_READY.name:
            ready = decode_push(methods.APP_READY, params)
            if ready is not None:
                self._set_info(
                    replace(self._info, broker_version=ready.version, node_name=ready.node_name)
                )

    def _on_settings_changed(self) -> None:
        snapshot = self._settings.snapshot
        if snapshot is not None:  # the level stays shown while the service is away
            self._set_info(replace(self._info, log_level=log_level_of(snapshot)))

    async def _refresh(self) -> None:
        version = await self._read(methods.VERSION)
        if version is not None:
            self._set_info(
                replace(self._info, broker_version=version.version, broker_commit=version.commit)
            )
        status = await self._read(methods.STATUS)
        if status is not None:
            self._set_info(
                replace(
                    self._info,
                    pid=status.pid,
                    node_name=status.node_name,
                    uptime_ms=status.uptime_ms,
                    uptime_read_at=time.monotonic(),
                )
            )

    async def _read(self, method: Method[NoParams, T]) -> T | None:
        try:
            return await self.connection.call(method)
        except RpcError as exc:
            log.info("%s failed: %s", method.name, exc)
            return None
