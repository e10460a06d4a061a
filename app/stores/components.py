"""The broker's supervised components and workers (``components:subscribe``)."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.stores.base import StreamStore
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.types.broker import (
    ComponentChanged,
    ComponentInfo,
    ComponentsEvent,
    ComponentsSnapshot,
)


class ComponentsStore(StreamStore[NoParams, ComponentsSnapshot, ComponentsEvent]):
    """Components by name, in the supervisor's order. ``component_changed`` names one whose
    state changed; ``reset`` after every snapshot."""

    component_changed = Signal(str)  # component name

    def __init__(self, connection: BrokerConnection, parent: QObject | None = None) -> None:
        super().__init__(
            connection, methods.COMPONENTS_SUBSCRIBE, methods.COMPONENTS_EVENT, None, parent
        )
        self._components: dict[str, ComponentInfo] = {}

    @property
    def components(self) -> Mapping[str, ComponentInfo]:
        """Every component and worker (read-only)."""
        return self._components

    def _load(self, snapshot: ComponentsSnapshot) -> None:
        self._components = {component.name: component for component in snapshot.components}

    def _apply(self, event: ComponentsEvent) -> None:
        match event:
            case ComponentChanged(component=component):
                self._components[component.name] = component
                self.component_changed.emit(component.name)

    def _forget(self) -> None:
        self._components = {}
