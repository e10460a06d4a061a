"""Keeps ``ComponentsModel`` equal to the broker's: a snapshot, then numbered events."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.controllers.subscription import NumberedSubscription
from app.models.components import ComponentsModel
from backend.protocol import methods
from backend.protocol.types import ComponentChanged, ComponentsSnapshot


class ComponentsController(Controller):
    """Subscribes on every new session, applies ``components:event`` in ``seq`` order, re-subscribes
    on a gap, and restarts components on request. Owns the subscription."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: ComponentsModel,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self._components = NumberedSubscription(
            self._tasks,
            connection,
            methods.COMPONENTS_SUBSCRIBE,
            ComponentsSnapshot,
            ComponentChanged,
            on_snapshot=lambda snapshot: model.reset(snapshot.components),
            on_event=lambda event: model.upsert(event.component),
        )

    def restart_component(self, name: str) -> None:
        """Ask the broker to restart one component or worker."""
        call = self.connection.call(methods.COMPONENTS_RESTART, {"name": name})
        self.run_command(call, what=f"restart {name}")

    def _on_connection_session_ready(self) -> None:
        self._components.start()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._components.reset()
            self.model.reset([])

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.COMPONENTS_EVENT:
            self._components.feed(params)
