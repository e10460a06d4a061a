"""The front doors as the GUI shows them: one address, client setting and example request per
client API (every door speaks all three and reaches every model of every computer in the
cluster), then the doors' real ports with moved-port notes (from ``status``, ``errors:update``
and the engines store's model lists); and the broker settings the General tab edits (the front
doors' timeouts and pinned node, llama.cpp's slots and context, through the settings store)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller, decode_push
from app.stores.engines import EnginesStore
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import RpcError
from backend.protocol.types.broker import ServiceError
from backend.protocol.types.engines import EngineModels
from backend.protocol.types.nodes import DiscoveredNode
from backend.protocol.types.settings import SettingSpec, SettingValue

log = logging.getLogger(__name__)

PORT_TAKEN_PREFIX = "proxy:port-taken:"
MODEL_PLACEHOLDER = "<model>"
HEADER_TIMEOUT = "proxy_header_timeout_s"
FIRST_CONTENT_TIMEOUT = "proxy_first_content_timeout_s"
PINNED_NODE = "proxy_pinned_node"
PLACEMENT = "placement_policy"
LLAMACPP_PARALLEL = "llamacpp_parallel"
LLAMACPP_CONTEXT = "llamacpp_context"
# The doors' ports (0: the one the service was started with); a change moves the door at once.
DOOR_PORTS = {"ollama": "ollama_door_port", "openai": "openai_door_port"}
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API refuses a request without this header
EXAMPLE_MAX_TOKENS = 256  # the Messages API requires max_tokens


@dataclass(frozen=True, slots=True)
class DoorKind:
    """A front door and the program whose usual port it takes, where apps look for it."""

    door: str
    usual_port_of: str


DOOR_KINDS: tuple[DoorKind, ...] = (
    DoorKind("ollama", "Ollama"),
    DoorKind("openai", "LM Studio"),
    DoorKind("llamacpp", "llama-server"),
)
_DOOR_ORDER = tuple(kind.door for kind in DOOR_KINDS)
_USUAL_PORT_OF = {kind.door: kind.usual_port_of for kind in DOOR_KINDS}


@dataclass(frozen=True, slots=True)
class ApiKind:
    """A client API: its title, the example's path, and the doors to name for it, best first
    (every door speaks it; the one at the port its apps expect comes first)."""

    api: str
    title: str
    chat_path: str
    doors: tuple[str, ...]


API_KINDS: tuple[ApiKind, ...] = (
    ApiKind("ollama", "Ollama API", "/api/chat", ("ollama", "openai", "llamacpp")),
    ApiKind("openai", "OpenAI API", "/v1/chat/completions", ("openai", "llamacpp", "ollama")),
    # Ollama takes Anthropic clients on its own port, so guides point them at 11434.
    ApiKind("anthropic", "Anthropic API", "/v1/messages", ("ollama", "openai", "llamacpp")),
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One client API as shown: the address a client takes, its setting, an example request."""

    api: str
    title: str
    url: str
    client_setting: str
    model: str | None
    example: str


@dataclass(frozen=True, slots=True)
class Door:
    """One front door as shown: its real URL, whose usual port it is, a moved-port note."""

    door: str
    usual_port_of: str
    url: str
    moved_note: str | None


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def curl_example(kind: ApiKind, door_url: str, model: str | None) -> str:
    """A ``curl`` chat request in the API's own shape (POSIX shell quoting), a few short lines."""
    fields = [f'"model": {json.dumps(model or MODEL_PLACEHOLDER)}']
    if kind.api == "anthropic":
        fields.append(f'"max_tokens": {EXAMPLE_MAX_TOKENS}')
    fields.append('"messages": [{"role": "user", "content": "Hello!"}]')
    if kind.api == "ollama":
        fields.append('"stream": false')  # one JSON answer instead of a stream of lines
    body = "{\n" + ",\n".join(f"  {field}" for field in fields) + "\n}"
    head = [f"curl {door_url}{kind.chat_path}"]
    if kind.api != "ollama":
        head.append('  -H "Content-Type: application/json"')
    if kind.api == "anthropic":
        head.append(f'  -H "anthropic-version: {ANTHROPIC_VERSION}"')
    return " \\\n".join(head) + f" -d {_shell_quote(body)}"


def base_url(kind: ApiKind, door_url: str) -> str:
    """The address the API's clients take (OpenAI's SDKs want the ``/v1`` in it; Anthropic's
    SDK adds ``/v1/messages`` itself)."""
    return f"{door_url}/v1" if kind.api == "openai" else door_url


def client_setting(kind: ApiKind, door_url: str) -> str:
    """The usual way to point the API's clients at the door."""
    if kind.api == "ollama":
        return f"OLLAMA_HOST={door_url.removeprefix('http://')}"
    if kind.api == "anthropic":
        return f"ANTHROPIC_BASE_URL={base_url(kind, door_url)}"
    return f"OPENAI_BASE_URL={base_url(kind, door_url)}"


def example_model(listings: Iterable[EngineModels | None]) -> str | None:
    """A model of the cluster for the examples, whatever its engine: a loaded one first, else
    the first listed (``listings``: this computer's, then the other members')."""
    present = [listing for listing in listings if listing is not None]
    loaded = (n for m in present for names in m.loaded_by_engine.values() for n in names)
    listed = (n for m in present for names in m.by_engine.values() for n in names)
    return next(loaded, None) or next(listed, None)


def moved_notes(errors: Sequence[ServiceError]) -> dict[str, str]:
    """door → the broker's sentence, for every door that had to move to another port."""
    return {
        error.id.removeprefix(PORT_TAKEN_PREFIX): error.message
        for error in errors
        if error.id.startswith(PORT_TAKEN_PREFIX)
    }


def door_order(front_doors: Iterable[str]) -> list[str]:
    """The doors in a fixed order (Ollama, OpenAI, llama.cpp, then any other by name)."""
    last = len(_DOOR_ORDER)
    return sorted(
        front_doors, key=lambda d: (_DOOR_ORDER.index(d) if d in _DOOR_ORDER else last, d)
    )


def build_doors(front_doors: Mapping[str, str], errors: Sequence[ServiceError]) -> list[Door]:
    """The open doors in order, each with its real URL and its moved-port note."""
    notes = moved_notes(errors)
    return [
        Door(door, _USUAL_PORT_OF.get(door, door), front_doors[door], notes.get(door))
        for door in door_order(front_doors)
    ]


def build_endpoints(front_doors: Mapping[str, str], model: str | None) -> list[Endpoint]:
    """One entry per client API, naming its preferred open door (else the first open one);
    none while no door is open."""
    if not front_doors:
        return []
    fallback = door_order(front_doors)[0]
    endpoints = []
    for kind in API_KINDS:
        door = next((d for d in kind.doors if d in front_doors), fallback)
        url = front_doors[door]
        endpoints.append(
            Endpoint(
                api=kind.api,
                title=kind.title,
                url=base_url(kind, url),
                client_setting=client_setting(kind, url),
                model=model,
                example=curl_example(kind, url, model),
            )
        )
    return endpoints


class EndpointsController(Controller):
    """Reads ``status`` per session, again on every ``errors:update`` and settings push (a door
    may have moved) and on ``refresh``; the examples' model comes from the engines store (this
    computer's models and the other members'). Owns the read."""

    changed = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        engines: EnginesStore,
        settings: SettingsStore,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self._engines = engines
        self._front_doors: dict[str, str] = {}
        self._errors: list[ServiceError] = []
        self._known = False  # a status was read in this session
        self._read: asyncio.Task[None] | None = None
        engines.reset.connect(self.changed)
        engines.models_changed.connect(self.changed)
        engines.member_changed.connect(self._on_engines_member_changed)
        settings.pushed.connect(self.refresh)

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
        self._errors = list(status.errors)
        self._known = True
        self.changed.emit()

    def _on_engines_member_changed(self, _node_id: str) -> None:
        self.changed.emit()

    def _on_connection_session_ready(self) -> None:
        self.refresh()

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is None:
            self._front_doors = {}
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


@dataclass(frozen=True, slots=True)
class NodeChoice:
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
