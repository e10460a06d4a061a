"""The settings as one frozen, typed value: what the broker and its components read."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from backend.protocol.proxy import PlacementPolicy
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import LOG_LEVELS, LogLevel
from backend.protocol.types.replicas import ReplicasMode
from backend.protocol.types.settings import SettingValue

REPLICAS_MODES: tuple[ReplicasMode, ...] = ("auto", "on", "off")


class SettingsView(msgspec.Struct, frozen=True):
    """Every setting of ``schema.SCHEMA``, one typed field per key (a test keeps them in step)."""

    node_name: str
    log_level: LogLevel
    proxy_header_timeout_s: float
    proxy_first_content_timeout_s: float
    proxy_pinned_node: NodeId | None  # None: the setting is empty
    placement_policy: PlacementPolicy = "pair"  # docs/PLACEMENT.md
    # Other computers may use the front doors with an API key; always off on a public network
    # (the stored setting keeps what the user chose, for when they leave it).
    lan_access: bool = False
    allowed_origins: tuple[str, ...] = ()  # browser origins the doors accept beyond loopback
    ollama_door_port: int = 0  # 0: the port the node was started with
    openai_door_port: int = 0
    llamacpp_door_port: int = 0
    llamacpp_parallel: int = 2  # llama-server's -np
    llamacpp_context: int = 4096  # llama-server's -c
    llamacpp_model: str = ""  # the store model llama-server loads at start; empty: the first
    local_discovery: bool = True  # mDNS announce and browse
    public_network: bool = False  # strangers get refusals; see ``lan_access`` and discovery
    replicas_mode: ReplicasMode = "auto"  # docs/REPLICAS.md
    replicas_target_wait_s: float = 10.0  # the expected wait that calls for another replica
    replicas_ttl_s: float = 300.0  # idle time before a replica PAIR loaded is unloaded
    replicas_max_per_model: int = 3  # members holding one model loaded, the user's counted

    @property
    def announces(self) -> bool:
        """Whether mDNS runs: local discovery on and not on a public network."""
        return self.local_discovery and not self.public_network

    @classmethod
    def of(cls, values: Mapping[str, SettingValue]) -> SettingsView:
        """The view of validated values (every key of the schema present)."""
        pinned = _text(values, "proxy_pinned_node")
        public = _flag(values, "public_network")
        return cls(
            node_name=_text(values, "node_name"),
            log_level=_log_level(values["log_level"]),
            proxy_header_timeout_s=_number(values, "proxy_header_timeout_s"),
            proxy_first_content_timeout_s=_number(values, "proxy_first_content_timeout_s"),
            proxy_pinned_node=NodeId(pinned) if pinned else None,
            placement_policy=_placement(values["placement_policy"]),
            # A public network keeps the doors to this computer whatever lan_access says.
            lan_access=_flag(values, "lan_access") and not public,
            allowed_origins=_listed(values, "allowed_origins"),
            ollama_door_port=_whole(values, "ollama_door_port"),
            openai_door_port=_whole(values, "openai_door_port"),
            llamacpp_door_port=_whole(values, "llamacpp_door_port"),
            llamacpp_parallel=_whole(values, "llamacpp_parallel"),
            llamacpp_context=_whole(values, "llamacpp_context"),
            llamacpp_model=_text(values, "llamacpp_model"),
            local_discovery=_flag(values, "local_discovery"),
            public_network=public,
            replicas_mode=_replicas_mode(values["replicas_mode"]),
            replicas_target_wait_s=_number(values, "replicas_target_wait_s"),
            replicas_ttl_s=_number(values, "replicas_ttl_s"),
            replicas_max_per_model=_whole(values, "replicas_max_per_model"),
        )


def _text(values: Mapping[str, SettingValue], key: str) -> str:
    value = values[key]
    if not isinstance(value, str):
        raise TypeError(f"setting {key!r} holds {value!r}, not a string")
    return value


def _listed(values: Mapping[str, SettingValue], key: str) -> tuple[str, ...]:
    """A comma-separated setting's entries, trimmed, empty ones left out."""
    return tuple(part.strip() for part in _text(values, key).split(",") if part.strip())


def _flag(values: Mapping[str, SettingValue], key: str) -> bool:
    value = values[key]
    if not isinstance(value, bool):
        raise TypeError(f"setting {key!r} holds {value!r}, not a boolean")
    return value


def _whole(values: Mapping[str, SettingValue], key: str) -> int:
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"setting {key!r} holds {value!r}, not an integer")
    return value


def _number(values: Mapping[str, SettingValue], key: str) -> float:
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"setting {key!r} holds {value!r}, not a number")
    return float(value)


def _placement(value: SettingValue) -> PlacementPolicy:
    if value == "pair":
        return "pair"
    if value == "reference":
        return "reference"
    raise TypeError(f"setting 'placement_policy' holds {value!r}, not pair or reference")


def _log_level(value: SettingValue) -> LogLevel:
    for level in LOG_LEVELS:
        if value == level:
            return level
    raise TypeError(f"setting 'log_level' holds {value!r}, not a log level")


def _replicas_mode(value: SettingValue) -> ReplicasMode:
    for mode in REPLICAS_MODES:
        if value == mode:
            return mode
    raise TypeError(f"setting 'replicas_mode' holds {value!r}, not auto, on or off")
