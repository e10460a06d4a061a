"""The broker's settings (``settings:get``, then ``settings:changed``), shared by every controller
that reads a setting: one read per session and one follower of the pushes for the whole app.

Each push carries the whole settings, so the pushes are the numbered events of this stream
with the snapshot itself as the event: the store counts them, and a read that a push overtook
is dropped (the push is newer). A push that cannot be decoded is a change missed, so the
settings are read again."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from backend.common.tasks import TaskSet
from backend.protocol import methods
from backend.protocol.errors import BadResult, RpcError
from backend.protocol.types.settings import (
    SettingSpec,
    SettingsSnapshot,
    SettingsUpdate,
    SettingValue,
)

log = logging.getLogger(__name__)


class SettingsStore(QObject):
    """The settings' values and schema as the broker last told them. ``changed`` follows every
    new value (a read, a push, a save's answer, the session's end); ``pushed`` follows the
    broker's ``settings:changed`` only (facts that follow a setting, such as a door's port,
    may have moved). Owns the read task."""

    changed = Signal()
    pushed = Signal()
    failed = Signal(str)  # the read failed; the message says why

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.connection = connection
        self.error: str | None = None  # why the last read failed; None once it worked
        self._snapshot: SettingsSnapshot | None = None
        self._seq = 0  # changes seen in this app: a read or save older than one is dropped
        self._reading: asyncio.Task[None] | None = None
        self._tasks = TaskSet(type(self).__name__)
        connection.session_ready.connect(self._on_connection_session_ready)
        connection.session_changed.connect(self._on_connection_session_changed)
        connection.notification_received.connect(self._on_connection_notification_received)

    @property
    def snapshot(self) -> SettingsSnapshot | None:
        """Every value and the schema; None until read in this session."""
        return self._snapshot

    @property
    def seq(self) -> int:
        """How many changes this store has applied (reads, pushes and saves)."""
        return self._seq

    def spec(self, key: str) -> SettingSpec | None:
        """The schema entry for ``key`` (None until read, or when the broker has no such key)."""
        if self._snapshot is None:
            return None
        return next((spec for spec in self._snapshot.schema if spec.key == key), None)

    def value(self, key: str) -> SettingValue | None:
        """The saved value of ``key`` (None until read)."""
        return None if self._snapshot is None else self._snapshot.values.get(key)

    def reread(self) -> None:
        """Read the settings again (while connected); the values stay until the answer."""
        if self.connection.ownership is None:
            return
        if self._reading is not None:
            self._reading.cancel()
        self._reading = self._tasks.spawn_if_running(self._read(self._seq), name="read")

    async def save(self, values: dict[str, SettingValue]) -> SettingsSnapshot:
        """``settings:set`` (all or nothing) and apply the answer; raises the broker's
        ``RpcError`` on a refusal."""
        seq_before = self._seq
        snapshot = await self.connection.call(methods.SETTINGS_SET, SettingsUpdate(values=values))
        if self._seq == seq_before:  # else a push carried this change (or a newer one)
            self._replace(snapshot)
        return snapshot

    async def close(self) -> None:
        """Cancel the read (bounded)."""
        await self._tasks.close(timeout=2.0)

    async def _read(self, seq_before: int) -> None:
        try:
            snapshot = await self.connection.call(methods.SETTINGS_GET)
        except RpcError as exc:
            log.info("settings:get failed: %s", exc)
            self.error = exc.message
            self.failed.emit(exc.message)
            return
        self.error = None
        if self._seq == seq_before:
            self._replace(snapshot)

    def _replace(self, snapshot: SettingsSnapshot) -> None:
        self._seq += 1
        self._snapshot = snapshot
        self.changed.emit()

    def _on_connection_session_ready(self) -> None:
        self.reread()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            if self._reading is not None:
                self._reading.cancel()
                self._reading = None
            self._snapshot, self.error = None, None
            self.changed.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method != methods.SETTINGS_CHANGED.name:
            return
        try:
            snapshot = methods.SETTINGS_CHANGED.decode(params)
        except BadResult as exc:
            log.warning("%s; reading the settings again", exc)
            self.reread()
        else:
            self._replace(snapshot)
        self.pushed.emit()
