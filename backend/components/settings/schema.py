"""The settings schema and pure validation."""

from __future__ import annotations

from collections.abc import Mapping

from backend.protocol.types.broker import LOG_LEVELS
from backend.protocol.types.settings import SettingSpec, SettingValue

SCHEMA: tuple[SettingSpec, ...] = (
    SettingSpec(
        key="node_name",
        type="string",
        default="",
        description="Name shown for this computer; empty means its hostname.",
    ),
    SettingSpec(
        key="log_level",
        type="enum",
        default="info",
        choices=list(LOG_LEVELS),
        description="Least severe log messages written by the broker and its workers.",
    ),
    SettingSpec(
        key="proxy_header_timeout_s",
        type="float",
        default=120.0,
        minimum=1.0,
        maximum=3600.0,
        description="Seconds the front door waits for an engine's response headers before it"
        " tries another node (PAIR_PROXY_HEADER_TIMEOUT_S overrides).",
    ),
    SettingSpec(
        key="proxy_first_content_timeout_s",
        type="float",
        default=120.0,
        minimum=1.0,
        maximum=3600.0,
        description="Seconds the front door waits after the headers for an engine's first"
        " output before it tries another node (PAIR_PROXY_FIRST_CONTENT_TIMEOUT_S overrides).",
    ),
    SettingSpec(
        key="proxy_pinned_node",
        type="string",
        default="",
        description="Node id the front doors try first whenever it has the model (empty: none).",
    ),
    SettingSpec(
        key="placement_policy",
        type="enum",
        default="pair",
        choices=["pair", "reference"],
        description="How the front doors choose among the computers that have a model: pair"
        " (expected completion: free slots, loaded models, measured speed, affinity) or"
        " reference (pending jobs + GPU pressure, as the reference system).",
    ),
    SettingSpec(
        key="lan_access",
        type="bool",
        default=False,
        description="Let computers on the network use the front doors with an API key.",
    ),
    SettingSpec(
        key="allowed_origins",
        type="string",
        default="",
        description="Browser origins besides this computer's pages that may use the front"
        " doors, comma-separated; * matches any part (e.g. chrome-extension://*,"
        " app://obsidian.md), as Ollama's OLLAMA_ORIGINS.",
    ),
    SettingSpec(
        key="ollama_door_port",
        type="int",
        default=0,
        minimum=0,
        maximum=65535,
        description="Port of the Ollama front door, 1024-65535; 0: the one the node was started"
        " with (--ollama-port, 11434). A change moves the door at once.",
    ),
    SettingSpec(
        key="openai_door_port",
        type="int",
        default=0,
        minimum=0,
        maximum=65535,
        description="Port of the OpenAI (LM Studio) front door, 1024-65535; 0: the one the node"
        " was started with (--openai-port, 1234). A change moves the door at once.",
    ),
    SettingSpec(
        key="llamacpp_door_port",
        type="int",
        default=0,
        minimum=0,
        maximum=65535,
        description="Port of the llama.cpp (llama-server) front door, 1024-65535; 0: the one the"
        " node was started with (--llamacpp-port, 8080). A change moves the door at once.",
    ),
    SettingSpec(
        key="llamacpp_parallel",
        type="int",
        default=2,
        minimum=1,
        maximum=16,
        description="Requests llama.cpp serves at once (its slots); a change restarts it.",
    ),
    SettingSpec(
        key="llamacpp_context",
        type="int",
        default=4096,
        minimum=256,
        maximum=1048576,
        description="Context size in tokens llama.cpp shares among its slots; a change restarts"
        " it.",
    ),
    SettingSpec(
        key="llamacpp_model",
        type="string",
        default="",
        description="Model of llama.cpp's store it loads when it starts; empty: the first by"
        " name. Loading a model sets it.",
    ),
    SettingSpec(
        key="local_discovery",
        type="bool",
        default=True,
        description="Announce this computer on the local network over mDNS and find the others"
        " there; off: members are still reached at their known addresses, others by address.",
    ),
    SettingSpec(
        key="public_network",
        type="bool",
        default=False,
        description="For untrusted networks (a café's Wi-Fi): no mDNS, node-info refused and"
        " invites from other computers refused to all but this cluster's members, and the"
        " front doors kept to this computer (as with lan_access off).",
    ),
    SettingSpec(
        key="replicas_mode",
        type="enum",
        default="auto",
        choices=["auto", "on", "off"],
        description="Whether PAIR loads a busy model on more computers of the cluster: auto (on"
        " while the cluster has more than one member), on or off.",
    ),
    SettingSpec(
        key="replicas_target_wait_s",
        type="float",
        default=10.0,
        minimum=1.0,
        maximum=600.0,
        description="Seconds a request may expect to wait for a model before PAIR loads it on"
        " another computer that can run it.",
    ),
    SettingSpec(
        key="replicas_ttl_s",
        type="float",
        default=300.0,
        minimum=30.0,
        maximum=86400.0,
        description="Seconds a copy of a model that PAIR loaded may sit unused before PAIR"
        " unloads it (models you loaded yourself stay).",
    ),
    SettingSpec(
        key="replicas_max_per_model",
        type="int",
        default=3,
        minimum=1,
        maximum=16,
        description="Most computers that hold one model loaded at once, counting those where"
        " you loaded it yourself.",
    ),
)
SPECS: dict[str, SettingSpec] = {spec.key: spec for spec in SCHEMA}
# A door takes the ports an engine may (below 1024 needs administrator rights); 0 keeps the
# port the node was started with.
DOOR_PORT_KEYS = frozenset({"ollama_door_port", "openai_door_port", "llamacpp_door_port"})
MIN_DOOR_PORT = 1024
_MAX_STRING = 256


def defaults() -> dict[str, SettingValue]:
    """Every setting at its default."""
    return {spec.key: spec.default for spec in SCHEMA}


def validate(key: str, value: object) -> SettingValue:
    """The value, checked against the schema; raises ValueError saying what is wrong."""
    spec = SPECS.get(key)
    if spec is None:
        raise ValueError(f"unknown setting {key!r}; known settings: {', '.join(SPECS)}")
    checked = _check_type(spec, value)
    if spec.choices is not None and checked not in spec.choices:
        raise ValueError(f"setting {key!r} must be one of {', '.join(spec.choices)}; got {value!r}")
    if isinstance(checked, int | float) and not isinstance(checked, bool):
        if spec.minimum is not None and checked < spec.minimum:
            raise ValueError(
                f"setting {key!r} must be at least {_text(spec.minimum)}; got {value!r}"
            )
        if spec.maximum is not None and checked > spec.maximum:
            raise ValueError(
                f"setting {key!r} must be at most {_text(spec.maximum)}; got {value!r}"
            )
    if key in DOOR_PORT_KEYS and isinstance(checked, int) and 0 < checked < MIN_DOOR_PORT:
        raise ValueError(
            f"setting {key!r} must be from {MIN_DOOR_PORT} to 65535, or 0 for the port the node"
            f" was started with; got {value!r}"
        )
    return checked


def _text(bound: float) -> str:
    """A bound as written in the schema: ``1048576``, not ``1.04858e+06``."""
    return str(int(bound)) if bound == int(bound) else f"{bound:g}"


def validate_all(values: Mapping[str, object]) -> dict[str, SettingValue]:
    """All values checked; raises ValueError naming every bad key at once."""
    problems: list[str] = []
    checked: dict[str, SettingValue] = {}
    for key, value in values.items():
        try:
            checked[key] = validate(key, value)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return checked


def _check_type(spec: SettingSpec, value: object) -> SettingValue:
    expected = {
        "bool": "a boolean",
        "int": "an integer",
        "float": "a number",
        "string": "a string",
        "enum": "a string",
    }[spec.type]
    if spec.type == "bool" and isinstance(value, bool):
        return value
    if spec.type == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if spec.type == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if spec.type in ("string", "enum") and isinstance(value, str):
        if len(value) > _MAX_STRING:
            raise ValueError(f"setting {spec.key!r} is longer than {_MAX_STRING} characters")
        return value
    raise ValueError(
        f"setting {spec.key!r} expects {expected}; got {type(value).__name__} {value!r}"
    )
