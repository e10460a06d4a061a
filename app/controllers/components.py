"""Keeps ``ComponentsModel`` equal to the broker's: a snapshot, then numbered events."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode
from app.models.components import ComponentsModel, EventStep, next_event_step
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import ComponentChanged, ComponentsSnapshot

log = logging.getLogger(__name__)


class ComponentsController(Controller):
    """Subscribes on every new session, applies ``components:event`` in ``seq`` order, re-subscribes
    on a gap, and restarts components on request. Owns the subscription task."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: ComponentsModel,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._seq: int | None = None  # None while no snapshot is applied
        self._early: list[ComponentChanged] = []  # events that overtook the snapshot
        self._subscription: asyncio.Task[None] | None = None

    def restart_component(self, name: str) -> None:
        """Ask the broker to restart one component or worker."""
        call = self.connection.call(methods.COMPONENTS_RESTART, {"name": name})
        self.run_command(call, what=f"restart {name}")

    def _on_connection_session_ready(self) -> None:
        self._subscribe()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._seq = None
            self.model.reset([])

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method != methods.COMPONENTS_EVENT:
            return
        event = decode(params, ComponentChanged)
        if event is None:
            return
        if self._seq is None:
            self._early.append(event)
        else:
            self._apply(event)

    def _subscribe(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
        self._seq = None
        self._early = []
        self._subscription = self._tasks.spawn(self._read_snapshot(), name="subscribe")

    async def _read_snapshot(self) -> None:
        try:
            raw = await self.connection.call(methods.COMPONENTS_SUBSCRIBE)
        except RpcError as exc:
            log.info("components:subscribe failed: %s", exc)
            return
        snapshot = decode(raw, ComponentsSnapshot)
        if snapshot is None:
            return
        self.model.reset(snapshot.components)
        self._seq = snapshot.seq
        early, self._early = self._early, []
        for event in sorted(early, key=lambda e: e.seq):
            self._apply(event)

    def _apply(self, event: ComponentChanged) -> None:
        assert self._seq is not None
        step = next_event_step(self._seq, event.seq)
        if step is EventStep.APPLY:
            self._seq = event.seq
            self.model.upsert(event.component)
        elif step is EventStep.GAP:
            log.info(
                "components: gap after seq %d (got %d); subscribing again", self._seq, event.seq
            )
            self._subscribe()
