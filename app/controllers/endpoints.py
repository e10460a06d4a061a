"""The front doors as the GUI shows them: one address, client setting and example request per
client API (every door speaks all three and reaches every model of every computer in the
cluster), then the doors' real ports with moved-port notes (from ``status``, ``errors:update``
and the engines store's model lists); and the broker settings the General tab edits (the front
doors' timeouts and pinned node, llama.cpp's slots and context, through the settings store)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import msgspec
from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode_push
from app.controllers.endpoint_texts import (
    API_KINDS,
    DOOR_KINDS,
    MODEL_PLACEHOLDER,
    ApiKind,
    Door,
    DoorKind,
    Endpoint,
    build_doors,
    build_endpoints,
    client_setting,
    curl_example,
    door_order,
    example_model,
    moved_notes,
    node_api_urls,
)
from app.lan_addresses import interface_addresses, lan_addresses
from app.stores.discovery import DiscoveryStore, is_self
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.settings import SettingSpec, SettingValue

# The builders live in endpoint_texts; importers of this module keep finding them here.
__all__ = [
    "API_KINDS",
    "DOOR_KINDS",
    "DOOR_PORTS",
    "MODEL_PLACEHOLDER",
    "ApiKind",
    "Door",
    "DoorKind",
    "Endpoint",
    "EndpointsController",
    "FrontDoorSettingsController",
    "build_doors",
    "build_endpoints",
    "client_setting",
    "curl_example",
    "door_order",
    "example_model",
    "moved_notes",
]

log = logging.getLogger(__name__)

HEADER_TIMEOUT = "proxy_header_timeout_s"
FIRST_CONTENT_TIMEOUT = "proxy_first_content_timeout_s"
PINNED_NODE = "proxy_pinned_node"
PLACEMENT = "placement_policy"
LLAMACPP_PARALLEL = "llamacpp_parallel"
LLAMACPP_CONTEXT = "llamacpp_context"
# The doors' ports (0: the one the service was started with); a change moves the door at once.
DOOR_PORTS = {
    "ollama": "ollama_door_port",
    "openai": "openai_door_port",
    "llamacpp": "llamacpp_door_port",
}


class EndpointsController(Controller):
    """Reads ``status`` per session, again on every ``errors:update`` and settings push (a door
    may have moved) and on ``refresh``; the examples' model comes from the engines store (this
    computer's models and the other members'), this computer's addresses from the discovery
    store (when given) and ``interfaces``. Owns the read."""

    changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        engines: EnginesStore,
        settings: SettingsStore,
        parent: QObject | None = None,
        *,
        discovery: DiscoveryStore | None = None,
        interfaces: Callable[[], list[str]] = interface_addresses,
    ) -> None:
        super().__init__(connection, parent)
        self._engines = engines
        self._discovery = discovery
        self._interfaces = interfaces
        self._node_port: int | None = None
        self._front_doors: dict[str, str] = {}
        self._errors: list[ServiceError] = []
        self._known = False  # a status was read in this session
        self._read: asyncio.Task[None] | None = None
        engines.reset.connect(self.changed)
        engines.models_changed.connect(self.changed)
        engines.member_changed.connect(self._on_engines_member_changed)
        settings.pushed.connect(self.refresh)
        if discovery is not None:
            discovery.reset.connect(self.changed)
            discovery.node_changed.connect(self._on_discovery_node_changed)

    @property
    def lan_addresses(self) -> list[str]:
        """Where another computer reaches this one: discovery's addresses for it first."""
        advertised = [
            address
            for node in (self._discovery.nodes.values() if self._discovery is not None else ())
            if is_self(node)
            for address in node.addresses
        ]
        return lan_addresses(advertised, self._interfaces())

    @property
    def node_api(self) -> list[str]:
        """The node API's URLs for other computers (none until the status was read)."""
        if self._node_port is None:
            return []
        return node_api_urls(self.lan_addresses, self._node_port)

    @property
    def endpoints(self) -> list[Endpoint]:
        """One entry per client API (none while no door is open)."""
        return build_endpoints(self._front_doors, self.example_model)

    @property
    def doors(self) -> list[Door]:
        """The open front doors."""
        return build_doors(self._front_doors, self._errors)

    @property
    def example_model(self) -> str | None:
        """A model of the cluster for the examples (members that are out of reach left out)."""
        members = self._engines.members.values()
        others = (member.models for member in members if member.reachable)
        return example_model([self._engines.models, *others])

    @property
    def front_doors(self) -> dict[str, str]:
        """door → URL, as ``status`` last said."""
        return dict(self._front_doors)

    @property
    def known(self) -> bool:
        """Whether the doors were read in this session (False: not connected or still reading)."""
        return self._known

    def refresh(self) -> None:
        """Read the doors again (while connected)."""
        if self.connection.ownership is None:
            return
        if self._read is not None:
            self._read.cancel()
        self._read = self._tasks.spawn(self._read_all(), name="read")

    async def _read_all(self) -> None:
        try:
            status = await self.connection.call(methods.STATUS)
        except RpcError as exc:
            log.info("status failed: %s", exc)
            return
        self._front_doors = dict(status.front_doors)
        self._node_port = status.ports.node
        self._errors = list(status.errors)
        self._known = True
        self.changed.emit()

    def _on_engines_member_changed(self, _node_id: str) -> None:
        self.changed.emit()

    def _on_discovery_node_changed(self, node_id: str) -> None:
        if self._discovery is not None and node_id == self._discovery.self_id:
            self.changed.emit()  # this computer's addresses may have changed

    def _on_connection_session_ready(self) -> None:
        self.refresh()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._front_doors = {}
            self._node_port = None
            self._errors = []
            self._known = False
            self.changed.emit()

    def _on_connection_notification_received(self, method: str, params: object) -> None:
        if method == methods.ERRORS_UPDATE.name:
            errors = decode_push(methods.ERRORS_UPDATE, params)
            if errors is not None:
                self._errors = errors
                self.changed.emit()
                self.refresh()


# Front-door settings.


class NodeChoice(msgspec.Struct, frozen=True):
    """One entry of the pinned-node list: the node id to save and its label."""

    node_id: str
    label: str


def bound_text(bound: float) -> str:
    """A bound as the schema means it: ``1048576``, not ``1.04858e+06``."""
    return str(int(bound)) if bound == int(bound) else f"{bound:g}"


def bounds_text(low: float | None, high: float | None) -> str:
    """``between 1 and 3600``, ``at least 1`` or ``at most 3600``."""
    if low is not None and high is not None:
        return f"between {bound_text(low)} and {bound_text(high)}"
    if low is not None:
        return f"at least {bound_text(low)}"
    return f"at most {bound_text(high)}" if high is not None else "any number"


def check_value(spec: SettingSpec, value: SettingValue) -> SettingValue:
    """``value`` within the schema's bounds; raises ValueError with a sentence for the user.

    A whole float for an int setting comes back as an int: the broker refuses ``2.0`` there."""
    if spec.type == "int" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = spec.minimum, spec.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"Must be {bounds_text(low, high)}.")
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"Must be one of {', '.join(spec.choices)}.")
    return value


def pinned_node_choices(nodes: Sequence[DiscoveredNode], pinned: str) -> list[NodeChoice]:
    """ "None" first, then the known nodes by name (this computer marked); an unknown pinned id
    stays selectable so the combo never hides what is saved."""
    choices = [NodeChoice("", "None")]
    for node in sorted(nodes, key=lambda n: ("self" not in n.sources, n.name.lower())):
        suffix = " (this computer)" if "self" in node.sources else ""
        choices.append(NodeChoice(node.node_id, f"{node.name}{suffix}"))
    if pinned and all(choice.node_id != pinned for choice in choices):
        choices.append(NodeChoice(pinned, f"Unknown node ({pinned[:8]})"))
    return choices


def rejection_text(exc: RpcError, key: str) -> str:
    """The broker's reason as a sentence about the field it is shown next to."""
    text = exc.message.removeprefix("Invalid params: ").removeprefix(f"setting {key!r} ")
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else f"{text}."


class FrontDoorSettingsController(Controller):
    """Shows the settings store's values, reads ``discovery:get-nodes`` per session, and saves
    one setting at a time. Owns the nodes read and the save tasks."""

    changed = Signal()
    value_saved = Signal(str)  # key
    value_rejected = Signal(str, str)  # key, reason for the user

    def __init__(
        self, connection: BrokerConnection, settings: SettingsStore, parent: QObject | None = None
    ) -> None:
        super().__init__(connection, parent)
        self.settings = settings
        self._nodes: list[DiscoveredNode] = []
        settings.changed.connect(self.changed)

    def spec(self, key: str) -> SettingSpec | None:
        """The schema entry for ``key`` (None until read)."""
        return self.settings.spec(key)

    def value(self, key: str) -> SettingValue | None:
        """The saved value of ``key`` (None until read)."""
        return self.settings.value(key)

    def node_choices(self) -> list[NodeChoice]:
        """Choices for the pinned node."""
        return pinned_node_choices(self._nodes, str(self.value(PINNED_NODE) or ""))

    def set_value(self, key: str, value: SettingValue) -> None:
        """Validate against the schema, then ``settings:set``; the outcome is a signal."""
        spec = self.spec(key)
        if spec is None:
            self.value_rejected.emit(key, "The service is not connected.")
            return
        try:
            checked = check_value(spec, value)
        except ValueError as exc:
            self.value_rejected.emit(key, str(exc))
            return
        if checked == self.value(key):
            return
        self._tasks.spawn(self._save(key, checked), name=f"save-{key}")

    def refresh_nodes(self) -> None:
        """Read the known nodes again (while connected)."""
        if self.connection.ownership is not None:
            self._tasks.spawn(self._read_nodes(), name="nodes")

    async def _save(self, key: str, value: SettingValue) -> None:
        try:
            await self.settings.save({key: value})
        except RpcError as exc:
            log.info("settings:set %s failed: %s", key, exc)
            self.value_rejected.emit(key, rejection_text(exc, key))
            self.changed.emit()  # the view shows the saved value again
            return
        self.value_saved.emit(key)  # the store signalled the new value first

    async def _read_nodes(self) -> None:
        try:
            self._nodes = await self.connection.call(methods.DISCOVERY_GET_NODES)
        except RpcError as exc:
            log.info("discovery:get-nodes failed: %s", exc)
            return
        self.changed.emit()

    def _on_connection_session_ready(self) -> None:
        self.refresh_nodes()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._nodes = []
            self.changed.emit()
