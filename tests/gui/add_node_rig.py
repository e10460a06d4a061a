"""The Add node dialog's world for GUI tests: a scripted connection, the discovery and cluster
stores fed by snapshots and numbered pushes, the controller, and a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.controllers.add_node import AddNodeController
from app.stores.cluster import ClusterStore
from app.stores.discovery import DiscoveryStore
from backend.protocol import methods
from backend.protocol.types.base import NodeId
from tests.fakes import FakeClock
from tests.gui.helpers import FakeConnection, wait_until

SELF_ID = NodeId("00000000-0000-4000-8000-000000000001")
LAPTOP = NodeId("00000000-0000-4000-8000-00000000000a")
DESKTOP = NodeId("00000000-0000-4000-8000-00000000000b")
STUDIO = NodeId("00000000-0000-4000-8000-00000000000c")
OWN_CLUSTER = "c-own"
NOW = 1_700_000_000.0
LAPTOP_FINGERPRINT = "sha256:3f2a9c0177de0b45" + "0" * 48
PORTS = {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080, "relay": 14321}


def node(node_id: str, name: str, address: str = "192.168.1.30", **extra: Any) -> dict[str, Any]:
    """A raw ``DiscoveredNode`` found over mDNS."""
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": ["mdns"],
        "addresses": [address], "ports": PORTS, "engines": {}, "reachable": True,
        "version": "0.1.0", **extra,
    }  # fmt: skip


def self_node() -> dict[str, Any]:
    return node(SELF_ID, "this-pc", "192.168.1.2", sources=["self"], cluster_id=OWN_CLUSTER)


def member(node_id: str, name: str) -> dict[str, Any]:
    """A raw ``ClusterMember``."""
    return {
        "node_id": node_id, "name": name, "fingerprint": "sha256:" + "cd" * 32,
        "address": "192.168.1.40", "node_port": 14320, "added_by": SELF_ID, "added_at": 1.0,
        "state": "online",
    }  # fmt: skip


def status(members: Iterable[dict[str, Any]] = (), invites: Iterable[dict[str, Any]] = ()) -> Any:
    """A raw ``ClusterStatus`` of this node in ``OWN_CLUSTER``."""
    return {
        "node_id": SELF_ID, "fingerprint": "sha256:" + "ab" * 32, "key_protection": "file",
        "cluster_id": OWN_CLUSTER, "cluster_name": "Home", "members": list(members),
        "invites": list(invites),
    }  # fmt: skip


def invite(state: str = "pending", **extra: Any) -> dict[str, Any]:
    """A raw outgoing ``Invite`` to the laptop."""
    return {
        "id": "inv-1", "direction": "outgoing", "peer_node_id": LAPTOP, "peer_name": "laptop",
        "peer_address": "192.168.1.30", "peer_fingerprint": LAPTOP_FINGERPRINT,
        "created_at": NOW, "expires_at": NOW + 300, "state": state, **extra,
    }  # fmt: skip


def created(state: str = "pending", pin: str = "482913", **extra: Any) -> dict[str, Any]:
    """A raw ``InviteCreated``."""
    return {"invite": invite(state, **extra), "pin": pin}


def node_info(node_id: str, name: str, system: str = "Linux", **extra: Any) -> dict[str, Any]:
    """A raw public ``NodeInfo``."""
    return {
        "node_id": node_id, "name": name, "version": "0.1.0", "os": {"system": system},
        "cpu": {}, "memory": {}, "gpus": [], "telemetry_valid": True, "ports": PORTS, **extra,
    }  # fmt: skip


@dataclass
class Rig:
    connection: FakeConnection
    discovery: DiscoveryStore
    cluster: ClusterStore
    controller: AddNodeController
    clock: FakeClock = field(default_factory=lambda: FakeClock(NOW))
    seq: int = 1

    async def start(
        self,
        nodes: Iterable[dict[str, Any]] = (),
        cluster: Any = None,
    ) -> None:
        """A ready session whose stores hold ``nodes`` (after this node) and ``cluster``."""
        self.connection.script(
            methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [self_node(), *nodes]}
        )
        self.connection.script(methods.CLUSTER_SUBSCRIBE, {"seq": 1, "status": cluster or status()})
        self.connection.become_ready()
        await wait_until(lambda: self.discovery.loaded and self.cluster.loaded, 5, "snapshots")

    def push_invite(self, raw: dict[str, Any]) -> None:
        """The broker tells that an invite appeared or moved on."""
        self.seq += 1
        self.connection.push(
            methods.CLUSTER_EVENT, {"seq": self.seq, "event": "invite_changed", "invite": raw}
        )

    def push_membership(self, raw_status: Any) -> None:
        self.seq += 1
        self.connection.push(
            methods.CLUSTER_EVENT,
            {"seq": self.seq, "event": "membership_changed", "status": raw_status},
        )

    def push_node(self, raw: dict[str, Any], discovery_seq: int) -> None:
        self.connection.push(
            methods.DISCOVERY_EVENT,
            {"seq": discovery_seq, "event": "node_joined", "node_id": raw["node_id"], "node": raw},
        )

    async def close(self) -> None:
        await self.controller.close()
        await self.discovery.close()
        await self.cluster.close()
        await self.connection.stop()


def build_rig() -> Rig:
    connection = FakeConnection()
    discovery = DiscoveryStore(connection)
    cluster = ClusterStore(connection)
    controller = AddNodeController(connection, discovery, cluster)
    return Rig(connection, discovery, cluster, controller)
