"""Reset app data: stop the service this app started, delete PAIR's files from the data folder
(``reset_data_files``), and start a fresh service."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec
from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.broker.state import Ownership
from app.controllers.reset_data_files import (
    DELETED,
    MODELS,
    DataKind,
    delete_app_data,
    entries_of,
    models_size,
)
from backend.common.tasks import TaskSet
from backend.protocol.endpoint import control_address, log_dir, open_control_connection

log = logging.getLogger(__name__)

NOT_OURS = (
    "The PAIR service for this data folder was started outside this app (pair node, a system "
    "service or another window). Stop it there first; the app does not delete the files of a "
    "service that is running."
)


class ResetPreview(msgspec.Struct, frozen=True):
    """What a reset would delete now: the kinds present, and the model stores' size."""

    present: tuple[DataKind, ...]
    models_bytes: int
    has_models: bool


def preview_of(data_dir: Path) -> ResetPreview:
    """What is in ``data_dir`` now (blocking: run it in a thread)."""
    present = tuple(kind for kind in DELETED if entries_of(data_dir, kind))
    has_models = bool(entries_of(data_dir, MODELS))
    return ResetPreview(present, models_size(data_dir) if has_models else 0, has_models)


async def service_answers(address: str) -> bool:
    """Whether a broker listens on the control ``address`` now."""
    try:
        _, writer = await asyncio.wait_for(open_control_connection(address), timeout=2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


class ResetDataController(QObject):
    """Runs a reset: refuses while a service this app did not start runs, else stops the owned
    one, deletes, and starts a fresh one. Owns the preview and reset tasks."""

    preview_ready = Signal(object)  # ResetPreview
    reset_refused = Signal(str)  # why, for the user
    reset_finished = Signal(object)  # ResetOutcome

    def __init__(
        self, connection: BrokerConnection, data_dir: Path, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.connection = connection
        self.data_dir = data_dir
        self.log_dir = log_dir(data_dir)
        self.running = False
        self._tasks = TaskSet(type(self).__name__)

    async def close(self) -> None:
        """Cancel the preview (a reset under way is waited for, bounded)."""
        await self._tasks.close(timeout=10.0)

    def may_reset(self) -> str | None:
        """Why a reset is refused now (None: it may run)."""
        if self.connection.ownership is Ownership.ATTACHED:
            return NOT_OURS
        return None

    def request_preview(self) -> None:
        """Measure what a reset would delete; ``preview_ready`` answers."""
        self._tasks.spawn(self._preview(), name="preview")

    def reset(self, *, models: bool) -> None:
        """Reset now (``models``: the model stores too); ``reset_finished`` or
        ``reset_refused`` answers."""
        refusal = self.may_reset()
        if refusal is not None or self.running:
            self.reset_refused.emit(refusal or "A reset is already under way.")
            return
        self.running = True
        self._tasks.spawn(self._reset(models), name="reset")

    async def _preview(self) -> None:
        self.preview_ready.emit(await asyncio.to_thread(preview_of, self.data_dir))

    async def _reset(self, models: bool) -> None:
        try:
            await self.connection.stop()  # an owned service stops; an attached one is refused
            if await service_answers(control_address(self.data_dir)):
                log.warning("reset refused: a service this app did not start answers")
                self.reset_refused.emit(NOT_OURS)
                return
            log.info("reset: deleting the app data of %s (models: %s)", self.data_dir, models)
            outcome = await asyncio.to_thread(
                delete_app_data, self.data_dir, self.log_dir, models=models
            )
            self.reset_finished.emit(outcome)
        finally:
            self.running = False
            self.connection.start()
