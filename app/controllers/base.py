"""What every controller shares: owned tasks, typed pushes and reporting failed commands."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from backend.common.tasks import TaskSet
from backend.protocol.contract import Push
from backend.protocol.errors import BadResult, RpcError

log = logging.getLogger(__name__)
E = TypeVar("E")


def decode_push(push: Push[E], params: object) -> E | None:
    """A push's raw params as its payload type; None (and a warning) when they do not fit."""
    try:
        return push.decode(params)
    except BadResult as exc:
        log.warning("%s", exc)
        return None


class Controller(QObject):
    """A controller: talks to the broker through ``connection`` and owns the tasks it starts."""

    command_failed = Signal(str)  # a user-facing sentence

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.connection = connection
        self._tasks = TaskSet(type(self).__name__)
        connection.session_ready.connect(self._on_connection_session_ready)
        connection.notification_received.connect(self._on_connection_notification_received)
        connection.session_changed.connect(self._on_connection_session_changed)

    async def close(self) -> None:
        """Cancel this controller's tasks (bounded)."""
        await self._tasks.close(timeout=2.0)

    def run_command(self, coro: Coroutine[Any, Any, object], *, what: str) -> None:
        """Run a user command in the background; a failure becomes ``command_failed``."""
        self._tasks.spawn(self._report_failure(coro, what), name=what)

    async def _report_failure(self, coro: Coroutine[Any, Any, object], what: str) -> None:
        try:
            await coro
        except RpcError as exc:
            log.warning("%s failed: %s", what, exc)
            self.command_failed.emit(f"Could not {what}: {exc}")

    def _on_connection_session_ready(self) -> None:
        """A new session is ready: re-read snapshots (override)."""

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        """A push arrived (override)."""

    def _on_connection_session_changed(self) -> None:
        """The session started or ended (override)."""
