"""The main window on a scripted connection, with the controllers it needs, for GUI tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytestqt.qtbot import QtBot

from app.controllers.components import ComponentsController
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.models.components import ComponentsModel
from app.models.errors import ErrorsModel
from app.stores.components import ComponentsStore
from app.stores.settings import SettingsStore
from app.window.main_window import MainWindow, Page
from tests.gui.helpers import FakeConnection


@dataclass(frozen=True)
class WindowRig:
    """The window and what drives it."""

    connection: FakeConnection
    service: ServiceController
    errors: ErrorsController
    components: ComponentsController
    window: MainWindow


@contextlib.asynccontextmanager
async def window_rig(
    qtbot: QtBot, tmp_path: Path, pages: Sequence[Page] = ()
) -> AsyncIterator[WindowRig]:
    """A main window (closing it closes it, not hides it) over a ``FakeConnection``;
    its controllers and connection are closed on the way out."""
    connection = FakeConnection()
    settings = SettingsStore(connection)
    service = ServiceController(connection, settings, tmp_path, lambda _url: True)
    store = ComponentsStore(connection)
    components = ComponentsController(connection, ComponentsModel(), store)
    errors = ErrorsController(connection, ErrorsModel(), components)
    window = MainWindow(
        connection, service, components.model, errors.model, errors,
        hide_on_close=False, pages=pages,
    )  # fmt: skip
    qtbot.addWidget(window)
    try:
        yield WindowRig(connection, service, errors, components, window)
    finally:
        for controller in (service, errors, components, store, settings):
            await controller.close()
        await connection.stop()
