"""The part the playground and the inference check share: the stores and door they read, and
the tasks and HTTP session of the chat requests they send to this computer's own door."""

from __future__ import annotations

import time

import aiohttp
from PySide6.QtCore import QObject

from app.controllers.endpoints import EndpointsController
from app.controllers.playground_stream import Clock
from app.stores.cluster import ClusterStore
from app.stores.engines import EnginesStore
from backend.common.tasks import TaskSet


class DoorChatController(QObject):
    """Owns the tasks of its chat requests and the one HTTP session they share; a subclass sets
    up its own state in ``_setup``, called at the end of construction."""

    def __init__(
        self,
        endpoints: EndpointsController,
        engines: EnginesStore,
        cluster: ClusterStore,
        clock: Clock = time.monotonic,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._endpoints = endpoints
        self._engines = engines
        self._cluster = cluster
        self._clock = clock
        self._tasks = TaskSet(type(self).__name__)
        self._session: aiohttp.ClientSession | None = None
        self._setup()

    def _setup(self) -> None:
        """A subclass's own state and signal connections (the stores are set by then)."""

    async def close(self) -> None:
        """Stop the requests under way and close the HTTP session."""
        await self._tasks.close(timeout=2.0)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        """The HTTP session, opened on first use (and again after a close)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session
