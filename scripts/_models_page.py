"""The Models page over a scripted connection, filled and shown, for the render scripts that
screenshot it (``render_replicas.py``, ``render_spread.py``).

Import it before ``app``, as ``_offscreen``: importing that sets Qt's platform and the path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from _offscreen import ScriptedConnection, wait_until

from app.catalog import load_catalog
from app.controllers.models import ModelsController
from app.pending import PendingActions
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.window.models_page import ModelsPage


@dataclass(frozen=True)
class ShownModelsPage:
    """A Models page on screen and the controller behind it."""

    page: ModelsPage
    controller: ModelsController


@asynccontextmanager
async def models_page(
    answers: dict[str, Any], size: tuple[int, int], rows: int
) -> AsyncIterator[ShownModelsPage]:
    """Show the Models page of ``size`` over a connection answering ``answers``, once it
    lists ``rows`` models and has painted them; everything is closed on leaving."""
    connection = ScriptedConnection(answers)
    engines, discovery = EnginesStore(connection), DiscoveryStore(connection)
    controller = ModelsController(connection, PendingActions(), engines, discovery)
    page = ModelsPage(controller, load_catalog())
    page.resize(*size)
    page.show()
    try:
        connection.become_ready()
        await wait_until(lambda: controller.models.rowCount() == rows)
        # The rows are in the model; let the view lay them out and paint before a grab.
        await asyncio.sleep(0.3)
        yield ShownModelsPage(page, controller)
    finally:
        await controller.close()
        await engines.close()
        await discovery.close()
        await connection.stop()
