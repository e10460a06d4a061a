"""What the broker sends its proxy worker: the routing table and the node's TLS identity.

Per engine, every node that runs it: this node's own engine (``local``), a paired PAIR node
(``peer``, reached over mutual TLS at that node's relay port, where it serves the request with
its own engine and never routes it again), or a bare engine added by address (``engine``). Each
carries the models its inventory lists; only those nodes are eligible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from backend.protocol.types.apikeys import ApiKeyScope
from backend.protocol.types.base import EngineName, Wire

Door = Literal["ollama", "openai", "llamacpp"]
# Every door reaches every model of every engine; this is the engine a door's other paths
# (``/api/version``, ``/props``, ``/api/pull``...) go to, and what its port is named after.
DOOR_ENGINES: Mapping[Door, EngineName] = {
    "ollama": EngineName("ollama"),
    "openai": EngineName("lmstudio"),
    "llamacpp": EngineName("llamacpp"),
}
DOORS: tuple[Door, ...] = ("ollama", "openai", "llamacpp")
_DOOR_RANK: Mapping[str, int] = {door: rank for rank, door in enumerate(DOORS)}


def door_rank(door: str) -> tuple[int, str]:
    """Sort key of doors in the order the app and the CLI list them: Ollama's, OpenAI's (LM
    Studio's port), llama.cpp's, then any other by name."""
    return (_DOOR_RANK.get(door, len(_DOOR_RANK)), door)


TargetKind = Literal["local", "peer", "engine"]
# How the front door ranks the owners of a model (docs/PLACEMENT.md). ``round_robin`` is a
# baseline for the placement benchmark only; the setting offers the other two.
PlacementPolicy = Literal["reference", "pair", "round_robin"]
PLACEMENT_POLICIES: tuple[PlacementPolicy, ...] = ("reference", "pair", "round_robin")
DEFAULT_PLACEMENT: PlacementPolicy = "pair"
DEFAULT_TIMEOUT_S = 120.0
# A member's stream silent this long is cut unless its member link is up (then it waits on up
# to the first-content timeout): a dead member's stream ends in seconds, a slow one goes on.
RELAY_IDLE_S = 20.0
# The proxy worker's parked conversations in an engine's slot folder: ``pair-kv-<digest>.bin``.
PARKED_PREFIX = "pair-kv-"
PARKED_SUFFIX = ".bin"


class SlotApi(Wire, frozen=True, kw_only=True):
    """How an engine names its slots (llama-server): the list of slots (``id``,
    ``is_processing`` per row), the erase action (``{id}`` is the slot), and the request field
    that pins a request to one slot. Where the engine can also save a slot's KV to a file of
    ``park_dir`` and restore it (``{"filename": ...}``), a conversation's KV is parked there
    when its slot goes to another conversation and restored when it comes back."""

    list_path: str = "/slots"
    erase_path: str = "/slots/{id}?action=erase"
    field: str = "id_slot"
    save_path: str | None = None
    restore_path: str | None = None
    park_dir: str | None = None

    @property
    def parks(self) -> bool:
        """Whether conversations can be parked: a folder and both actions are known."""
        return (
            self.park_dir is not None
            and self.save_path is not None
            and self.restore_path is not None
        )


class RouteTarget(Wire, frozen=True, kw_only=True):
    """One node that runs an engine: how to reach it and what its inventory lists.

    ``base_url`` is the engine's own URL for ``local`` and ``engine`` targets, and the peer's
    relay listener (``https://host:relay-port``) for ``peer`` targets, whose ``cert_der`` is
    the certificate pinned for it at pairing (the only one its TLS handshake may show).
    ``slots`` is how many requests the engine runs at once per model, ``model_slots``
    per-model exceptions, ``resident`` the models it holds now (a peer's from its node-info;
    placement reads it only where ``resident_known``: the node said what it holds). Local
    only, for the engine's scheduler: ``single_model`` whether it holds one at a time (and
    must be relaunched for another, as llama-server is), ``instance`` a number that changes
    whenever the engine is relaunched (its slots and their KV are new), ``slot_api`` how to
    read and erase its slots where it has them, ``slots_known`` false when ``slots`` is only a
    guess (an adopted engine configured by an environment PAIR cannot see): then the scheduler
    does not limit how many run.
    """

    node_id: str
    kind: TargetKind
    base_url: str
    name: str = ""
    models: list[str] = msgspec.field(default_factory=list)
    slots: int = 1
    model_slots: dict[str, int] = msgspec.field(default_factory=dict)
    cert_der: bytes | None = None
    resident: list[str] = msgspec.field(default_factory=list)
    single_model: bool = False
    instance: int = 0
    slot_api: SlotApi | None = None
    slots_known: bool = True
    resident_known: bool = False
    engine: str = ""
    # Local only: the key this node's engine was launched with; sent to it as a bearer token
    # and never to another computer.
    api_key: str | None = None
    # model (as this target names it) -> ``sha256:<hex>`` of its weights: targets whose models
    # share a digest serve one model, each under its own name.
    digests: dict[str, str] = msgspec.field(default_factory=dict)

    def __repr__(self) -> str:
        # Never print the engine's key, whatever logs or tracebacks show a target.
        shown = msgspec.structs.replace(self, api_key="<hidden>") if self.api_key else self
        return msgspec.Struct.__repr__(shown)


class GpuSample(Wire, frozen=True, kw_only=True):
    """A node's busiest GPU's utilisation (percent) and when it was read (Unix time)."""

    percent: float
    sampled_at: float


class AwayModels(Wire, frozen=True, kw_only=True):
    """What a paired member's engine listed while it served, now that it does not (the member
    cannot be reached, or restarts the engine): a door asked for one of ``models`` answers 503,
    naming the member, instead of 404."""

    node_id: str
    name: str
    engine: str
    models: list[str] = msgspec.field(default_factory=list)


class DoorKey(Wire, frozen=True, kw_only=True):
    """A LAN API key as the doors know it (by its hash): its name, for job records and logs,
    and its scope (``admin`` also opens the doors' pass-through to this computer's engines)."""

    name: str
    scope: ApiKeyScope = "inference"


class ProxyTargets(Wire, frozen=True, kw_only=True):
    """The routing table: targets per engine name (``ollama``, ``lmstudio``, ``llamacpp``).

    ``loads`` is each node's pending work at snapshot ``generation`` (reservations taken since
    are the proxy's own). ``pins`` names a node to try first per engine; ``priority`` is the
    scheduler's order. Timeouts are seconds for the response headers and for the first body
    byte after them; ``relay_idle_s`` bounds the silence between a member's chunks while its
    link is down. ``trusted`` holds the certificates (DER) of the paired members: the only
    clients the relay listener lets in. ``lan_access`` lets other computers use the front doors
    with a LAN API key whose SHA-256 (hex) is in ``api_key_hashes`` (sent only while it is on);
    ``api_keys`` gives each one's name and scope (a hash missing there is an inference key).
    ``allowed_origins`` are browser origins (``*`` a wildcard) the doors accept beyond loopback.
    ``placement`` is the ranking rule among owners (the setting), ``gpu`` each node's last GPU
    utilisation sample (the reference rule's pressure). ``away`` lists what members served a
    short while ago and do not now.
    """

    node_id: str = ""
    generation: int = 0
    engines: dict[str, list[RouteTarget]] = msgspec.field(default_factory=dict)
    loads: dict[str, int] = msgspec.field(default_factory=dict)
    pins: dict[str, str] = msgspec.field(default_factory=dict)
    priority: list[str] = msgspec.field(default_factory=list)
    header_timeout_s: float = DEFAULT_TIMEOUT_S
    first_content_timeout_s: float = DEFAULT_TIMEOUT_S
    relay_idle_s: float = RELAY_IDLE_S
    trusted: list[bytes] = msgspec.field(default_factory=list)
    lan_access: bool = False
    api_key_hashes: list[str] = msgspec.field(default_factory=list)
    api_keys: dict[str, DoorKey] = msgspec.field(default_factory=dict)
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    placement: PlacementPolicy = DEFAULT_PLACEMENT
    gpu: dict[str, GpuSample] = msgspec.field(default_factory=dict)
    away: list[AwayModels] = msgspec.field(default_factory=list)
    # The user's model aliases (``pair model alias NAME TARGET``): a request for NAME is one
    # for TARGET, and reaches every replica of it.
    aliases: dict[str, str] = msgspec.field(default_factory=dict)


class ModelDemand(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """Demand for one model at this node's doors since the worker's last report.

    ``model`` is the name clients asked for, ``digest`` its weights' identity where known,
    ``requests`` how many were admitted, ``wait_s`` the longest wait placement expected for
    one of them before it could start (for a slot, plus a load where the model was not
    resident) on the node it chose, ``queued`` how many wait for a slot now, ``owners`` the
    nodes that had it loaded or on disk."""

    model: str
    digest: str | None = None
    requests: int = 0
    wait_s: float = 0.0
    queued: int = 0
    owners: list[str] = msgspec.field(default_factory=list)


class LocalUse(Wire, frozen=True, kw_only=True):
    """One model of this node's engine: when a request last ran on it (Unix time), whoever
    asked (this node's doors or a member's, through the relay), and how many run now."""

    engine: str
    model: str
    last_used_at: float
    active: int = 0


class DemandReport(Wire, frozen=True, kw_only=True):
    """``proxy:demand``: what the worker saw since its last report (about once a second,
    only when something changed): demand per model and the local engines' use per model."""

    at: float
    models: list[ModelDemand] = msgspec.field(default_factory=list)
    local: list[LocalUse] = msgspec.field(default_factory=list)


class ProxyIdentity(Wire, frozen=True, kw_only=True):
    """This node's certificate and private key (PEM; the key unencrypted PKCS8), for the relay."""

    cert_pem: str
    key_pem: str

    def __repr__(self) -> str:
        # Never print the key, whatever logs or tracebacks show this payload.
        return f"ProxyIdentity(cert_pem=<{len(self.cert_pem)} chars>, key_pem=<hidden>)"


class ExclusiveLease(Wire, frozen=True, kw_only=True, omit_defaults=True):
    """``proxy:exclusive``: run ``kind`` (about ``model``) alone on ``engine`` once drained;
    ``lease`` names it until ``proxy:exclusive-end``."""

    engine: str
    kind: str
    lease: str
    model: str | None = None


class LeaseRef(Wire, frozen=True, kw_only=True):
    """``proxy:exclusive-end``: the lease is over (granted or still waiting)."""

    lease: str


class ModelSwitch(Wire, frozen=True, kw_only=True):
    """``proxy:load-model``: make ``model`` the one ``engine`` holds (the scheduler drained
    it first)."""

    engine: str
    model: str


class ModelSwitched(Wire, frozen=True, kw_only=True):
    """Answer of ``proxy:load-model``: the relaunched engine's ``instance``."""

    instance: int


class DoorHandover(Wire, frozen=True, kw_only=True):
    """``proxy:adopt-door``: serve ``door`` on the listening socket just sent, with ``door``
    as its message, over the worker's hand-over channel (a Unix socket: ``SCM_RIGHTS``)."""

    door: Door


class DoorServed(Wire, frozen=True, kw_only=True):
    """Answer of ``proxy:adopt-door``: the door now accepts on ``port`` only."""

    door: Door
    port: int


SHARED_RELAY: Literal["relay"] = "relay"
SharedListenerName = Door | Literal["relay"]


class SharedListener(Wire, frozen=True, kw_only=True):
    """``proxy:take-listener``: serve ``listener`` (a door or the relay) on the listening
    socket in ``shared``: the bytes of ``socket.share(worker_pid)``, base64. The way a
    listener reaches the worker where no descriptor can be inherited or sent (Windows)."""

    listener: SharedListenerName
    shared: str


class ListenerTaken(Wire, frozen=True, kw_only=True):
    """Answer of ``proxy:take-listener``: the worker holds the socket bound to ``port`` (a
    door already served accepts there only from now on)."""

    listener: SharedListenerName
    port: int
