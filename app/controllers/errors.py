"""Keeps ``ErrorsModel`` equal to the broker's errors registry and runs the errors' actions."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode_push
from app.controllers.components import ComponentsController
from app.models.errors import ErrorsModel
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types import EngineName, EngineRef, ErrorClear, ServiceError

log = logging.getLogger(__name__)
ENGINE_START_TIMEOUT_S = 120.0  # an engine may take a minute to answer its readiness probe


class ErrorsController(Controller):
    """Reads ``errors:get-initial`` per session and applies ``errors:update`` snapshots as row
    changes. Owns the read task."""

    open_settings_requested = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        model: ErrorsModel,
        components: ComponentsController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._components = components
        self._updates = 0  # pushes seen: a push newer than an in-flight read wins

    def dismiss(self, error: ServiceError) -> None:
        """Clear an error (a later report brings it back)."""
        call = self.connection.call(
            methods.ERRORS_CLEAR, ErrorClear(id=error.id, node_id=error.node_id)
        )
        self.run_command(call, what="dismiss the message")

    def run_action(self, error: ServiceError) -> None:
        """Do what the error's action offers."""
        action = error.action
        if action is None or action.kind == "dismiss":
            self.dismiss(error)
        elif action.kind == "restart-component" and action.target:
            self._components.restart_component(action.target)
        elif action.kind == "open-settings":
            self.open_settings_requested.emit()
        elif action.kind == "retry" and action.target and error.id.startswith("engine:"):
            # An engine that failed to start or crashed: starting it again is the retry; a
            # successful start clears the error on the broker's side.
            params = EngineRef(engine=EngineName(action.target))
            call = self.connection.call(
                methods.ENGINE_START, params, timeout=ENGINE_START_TIMEOUT_S
            )
            self.run_command(call, what=f"start {action.target}")
        else:
            # Other retries have no generic meaning: the owning component retries by itself.
            log.info("no handler for error action %s", action.kind)

    def _on_connection_session_ready(self) -> None:
        self._tasks.spawn(self._read_initial(self._updates), name="get-initial")

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self.model.sync([])

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method != methods.ERRORS_UPDATE.name:
            return
        errors = decode_push(methods.ERRORS_UPDATE, params)
        if errors is not None:
            self._updates += 1
            self.model.sync(errors)

    async def _read_initial(self, updates_before: int) -> None:
        try:
            errors = await self.connection.call(methods.ERRORS_GET_INITIAL)
        except RpcError as exc:
            log.info("errors:get-initial failed: %s", exc)
            return
        if self._updates == updates_before:
            self.model.sync(errors)
