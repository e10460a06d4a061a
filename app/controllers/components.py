"""Keeps ``ComponentsModel`` equal to the ``ComponentsStore`` and restarts components."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.models.components import ComponentsModel
from app.stores.components import ComponentsStore
from backend.protocol import methods
from backend.protocol.types.broker import ComponentRef


class ComponentsController(Controller):
    """Shows the store's components as row changes (a reset per snapshot) and restarts
    components on request. Owns the restart tasks."""

    def __init__(
        self,
        connection: BrokerConnection,
        model: ComponentsModel,
        store: ComponentsStore,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.model = model
        self.store = store
        store.reset.connect(self._on_store_reset)
        store.cleared.connect(self._on_store_reset)
        store.component_changed.connect(self._on_store_component_changed)

    def restart_component(self, name: str) -> None:
        """Ask the broker to restart one component or worker."""
        call = self.connection.call(methods.COMPONENTS_RESTART, ComponentRef(name=name))
        self.run_command(call, what=f"restart {name}")

    def _on_store_reset(self) -> None:
        self.model.reset(self.store.components.values())

    def _on_store_component_changed(self, name: str) -> None:
        component = self.store.components.get(name)
        if component is not None:
            self.model.upsert(component)
