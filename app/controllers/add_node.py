"""Add node: which computers on this network could join, who answers at a typed address
(``cluster:probe``), inviting one (``cluster:invite``: the PIN is in the answer, and only
there), and canceling that invite (``cluster:cancel``).

An invite's later states come from the cluster store's ``invite_changed``; this controller
passes on those of the invites it opened as ``invite_updated``, so a PIN panel follows one
signal whatever told the news (the invite's answer, the cancel's answer or a push).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

import msgspec
from PySide6.QtCore import QObject, Signal

from app.address import DEFAULT_PORT, Address
from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore, is_self
from backend.protocol import methods
from backend.protocol.errors import CallTimeout, Conflict, InvalidParams, RpcError, Unavailable
from backend.protocol.types.base import InviteId, NodeId
from backend.protocol.types.cluster import Invite, InviteParams, InviteRef, NodeProbe
from backend.protocol.types.nodes import DiscoveredNode, NodeOs, NodeTelemetry

log = logging.getLogger(__name__)

# The broker asks the other computer for its node-info (10 s at most) before it answers a
# probe, and for node-info, its certificate and the offer (10 s each) before an invite's.
PROBE_TIMEOUT_S = 20.0
INVITE_TIMEOUT_S = 45.0
GB = 10**9
SYSTEM_NAMES = {"Darwin": "macOS", "Linux": "Linux", "Windows": "Windows"}
RESTARTED = "the PAIR service restarted, which ends every open invite; start a new one"


class Candidate(msgspec.Struct, frozen=True):
    """A PAIR computer on this network that is not this one and not a member."""

    node_id: NodeId
    name: str
    address: Address
    version: str | None = None
    system: str | None = None  # "Linux", "macOS", ... once a probe told it
    gpu: str | None = None  # "24 GB GPU", from its telemetry
    in_other_cluster: bool = False
    reachable: bool = True

    @property
    def invitable(self) -> bool:
        """Whether an invite could work (it answers and is in no other cluster)."""
        return self.reachable and not self.in_other_cluster


class ProbeResult(msgspec.Struct, frozen=True):
    """What a probe of ``address`` found: the sentence to show, and whether to offer Invite."""

    address: Address
    message: str
    invitable: bool
    probe: NodeProbe | None = None  # None when nothing answered or the call failed


def system_name(os: NodeOs) -> str | None:
    """``macOS``, ``Linux``, ``Windows`` (or what the platform says) when known."""
    if not os.system:
        return None
    return SYSTEM_NAMES.get(os.system, os.system)


def gpu_text(telemetry: NodeTelemetry | None) -> str | None:
    """``24 GB GPU`` from the telemetry's VRAM, ``GPU`` when only its load is known."""
    if telemetry is None:
        return None
    if telemetry.vram_total_bytes:
        return f"{telemetry.vram_total_bytes / GB:.0f}\u00a0GB GPU"
    return "GPU" if telemetry.gpu_percent is not None else None


def candidates(
    nodes: Iterable[DiscoveredNode],
    *,
    self_id: NodeId | None,
    members: set[NodeId],
    cluster_id: str | None,
    systems: Mapping[NodeId, str] | None = None,
) -> list[Candidate]:
    """The PAIR nodes that are neither this node nor members (nor in this cluster), by name."""
    found = []
    for node in nodes:
        if node.kind != "pair" or is_self(node) or node.node_id in (self_id, *members):
            continue
        if cluster_id is not None and node.cluster_id == cluster_id:
            continue  # a member this node has not heard of yet
        if not node.addresses:
            continue
        address = Address(node.addresses[0], node.ports.get("node", DEFAULT_PORT))
        found.append(
            Candidate(
                node_id=node.node_id,
                name=node.name,
                address=address,
                version=node.version,
                system=(systems or {}).get(node.node_id),
                gpu=gpu_text(node.telemetry),
                in_other_cluster=node.cluster_id is not None,
                reachable=node.reachable,
            )
        )
    return sorted(found, key=lambda c: (c.name.lower(), c.node_id))


def probe_result(address: Address, probe: NodeProbe, cluster_id: str | None) -> ProbeResult:
    """The sentence for a node that answered: who it is, or why it cannot be invited."""
    info = probe.info
    details = ", ".join(part for part in (f"PAIR {info.version}", system_name(info.os)) if part)
    who = f"{info.name} ({details}) answers at {address}"
    if not probe.invitable:
        reason = probe.reason or "it cannot be invited"
        return ProbeResult(address, f"{who}, but {reason}.", False, probe)
    if info.cluster_id is not None and info.cluster_id != cluster_id:
        why = f"{who}, but it is in another cluster: it has to leave that one first."
        return ProbeResult(address, why, False, probe)
    return ProbeResult(address, f"{who}.", True, probe)


def nothing_answers(address: Address) -> str:
    """The sentence for an address where no PAIR node answers."""
    return (
        f"No PAIR computer answers at {address}. Check the address, and that PAIR is running "
        "on that computer (its firewall must let port "
        f"{address.port} in)."
    )


def invite_error(address: Address, exc: RpcError) -> str:
    """A failed ``cluster:invite`` in words."""
    if isinstance(exc, Unavailable):
        return nothing_answers(address)
    if isinstance(exc, InvalidParams):
        return f"{address} is this computer: invite another one."
    if isinstance(exc, Conflict):
        return _sentence(exc.message)  # it names the computer and why
    if isinstance(exc, CallTimeout):
        return f"The invite to {address} took too long. Try again."
    return f"Could not invite {address}: {exc.message}"


def _sentence(text: str) -> str:
    # Not capitalised: the broker's reasons often start with a computer's name, as it is spelt.
    text = text.strip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


class AddNodeController(Controller):
    """Runs the Add node dialog's calls and keeps its list of candidates. ``candidates_changed``
    when the list changed; ``probed`` (a ``ProbeResult``) after a probe, only the latest one;
    ``invite_created`` (``InviteCreated``; an invite that ended at once, ``busy`` say, has the
    PIN ``""``) or ``invite_failed`` (a sentence) after an invite; ``invite_updated``
    (``Invite``) whenever an invite opened here moved on; ``cancel_failed`` (invite id,
    sentence). Owns its probe, invite and cancel tasks."""

    candidates_changed = Signal()
    probed = Signal(object)  # ProbeResult
    invite_created = Signal(object)  # InviteCreated
    invite_failed = Signal(str)  # a sentence
    invite_updated = Signal(object)  # Invite
    cancel_failed = Signal(str, str)  # InviteId, a sentence

    def __init__(
        self,
        connection: BrokerConnection,
        discovery: DiscoveryStore,
        cluster: ClusterStore,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(connection, parent)
        self.discovery = discovery
        self.cluster = cluster
        self._candidates: list[Candidate] = []
        self._systems: dict[NodeId, str] = {}  # from probes: the directory does not carry it
        self._opened: dict[InviteId, Invite] = {}  # the invites opened here, as last seen
        self._probing: asyncio.Task[None] | None = None
        self._inviting: asyncio.Task[None] | None = None
        for signal in (discovery.reset, discovery.cleared, cluster.cleared, cluster.status_changed):
            signal.connect(self._refresh)
        discovery.node_changed.connect(self._on_discovery_node_changed)
        discovery.telemetry_changed.connect(self._on_discovery_node_changed)
        discovery.node_removed.connect(self._on_discovery_node_changed)
        cluster.reset.connect(self._on_cluster_reset)
        cluster.invite_changed.connect(self._on_cluster_invite_changed)
        self._refresh()

    @property
    def candidates(self) -> list[Candidate]:
        """The computers that could be invited (or are shown as in another cluster), by name."""
        return list(self._candidates)

    @property
    def inviting(self) -> bool:
        """Whether an invite call is under way."""
        return self._inviting is not None and not self._inviting.done()

    def probe(self, address: Address) -> None:
        """Ask who answers at ``address``; a newer probe replaces one under way."""
        if self._probing is not None:
            self._probing.cancel()
        self._probing = self._tasks.spawn(self._probe(address), name="probe")

    def invite(self, address: Address) -> None:
        """Invite the computer at ``address`` (ignored while another invite call is under way)."""
        if self.inviting:
            return
        self._inviting = self._tasks.spawn(self._invite(address), name="invite")

    def cancel(self, invite_id: InviteId) -> None:
        """Cancel an invite opened here; the outcome arrives as ``invite_updated``."""
        if self._tasks.spawn_if_running(self._cancel(invite_id), name="cancel") is None:
            # A dialog closed while the app shuts down, after the loop stopped: the broker's
            # own five-minute expiry ends the invite.
            log.info("invite %s left to expire: no event loop to cancel it", invite_id)

    # Calls -----------------------------------------------------------------------------------

    async def _probe(self, address: Address) -> None:
        params = InviteParams(address=address.host, port=address.port)
        try:
            probe = await self.connection.call(methods.CLUSTER_PROBE, params, PROBE_TIMEOUT_S)
        except Unavailable:
            self.probed.emit(ProbeResult(address, nothing_answers(address), False))
            return
        except RpcError as exc:
            log.info("cluster:probe %s failed: %s", address, exc)
            message = f"Could not check {address}: {exc.message}"
            self.probed.emit(ProbeResult(address, message, False))
            return
        system = system_name(probe.info.os)
        if system is not None and self._systems.get(probe.info.node_id) != system:
            self._systems[probe.info.node_id] = system
            self._refresh()
        status = self.cluster.status
        self.probed.emit(probe_result(address, probe, status.cluster_id if status else None))

    async def _invite(self, address: Address) -> None:
        params = InviteParams(address=address.host, port=address.port)
        try:
            created = await self.connection.call(methods.CLUSTER_INVITE, params, INVITE_TIMEOUT_S)
        except RpcError as exc:
            log.info("cluster:invite %s failed: %s", address, exc)
            self.invite_failed.emit(invite_error(address, exc))
            return
        invite = created.invite
        known = self.cluster.invite(invite.id)
        if known is not None and known.state != "pending":
            invite = known  # a push already told how it ended
        self._opened[invite.id] = invite
        self.invite_created.emit(msgspec.structs.replace(created, invite=invite))

    async def _cancel(self, invite_id: InviteId) -> None:
        try:
            invite = await self.connection.call(methods.CLUSTER_CANCEL, InviteRef(id=invite_id))
        except RpcError as exc:
            log.info("cluster:cancel %s failed: %s", invite_id, exc)
            self.cancel_failed.emit(invite_id, f"Could not cancel the invite: {exc.message}")
            return
        self._update(invite)

    # Stores ----------------------------------------------------------------------------------

    def _on_discovery_node_changed(self, _node_id: NodeId) -> None:
        self._refresh()

    def _on_cluster_reset(self) -> None:
        self._refresh()
        for invite_id, invite in list(self._opened.items()):
            known = self.cluster.invite(invite_id)
            if known is not None:
                self._update(known)
            elif invite.state == "pending":
                self._update(msgspec.structs.replace(invite, state="failed", reason=RESTARTED))

    def _on_cluster_invite_changed(self, invite_id: InviteId) -> None:
        invite = self.cluster.invite(invite_id)
        if invite is not None and invite_id in self._opened:
            self._update(invite)

    def _update(self, invite: Invite) -> None:
        """Pass on news of an invite opened here; an ended invite stays as it ended."""
        last = self._opened.get(invite.id)
        if last is not None and last.state != "pending":
            return
        self._opened[invite.id] = invite
        if invite != last:
            self.invite_updated.emit(invite)

    def _refresh(self) -> None:
        status = self.cluster.status
        found = candidates(
            self.discovery.nodes.values(),
            self_id=self.discovery.self_id or (status.node_id if status else None),
            members={member.node_id for member in self.cluster.members()},
            cluster_id=status.cluster_id if status else None,
            systems=self._systems,
        )
        if found != self._candidates:
            self._candidates = found
            self.candidates_changed.emit()
