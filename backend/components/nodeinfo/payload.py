"""What ``/v1/node-info`` and ``nodeinfo:get`` answer: identity, hardware, services, models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import msgspec

from backend.components.engines.slots import routing_slots
from backend.components.nodeinfo.host import read_os
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeCpu, NodeEngineModels, NodeInfo, NodeMemory, NodeOs

if TYPE_CHECKING:
    from backend.components.engines.component import EnginesComponent

T = TypeVar("T")


class NodeInfoSource(msgspec.Struct, frozen=True):
    """Builds the node-info payload from the node's identity, settings, telemetry and engines."""

    node_id: NodeId
    version: str
    ports: Callable[[], Ports]
    name: Callable[[], str]
    telemetry: Callable[[], TelemetryView]
    engine_models: Callable[[], Mapping[str, NodeEngineModels]] = dict
    # Requests at this node's front doors and relays, waiting or running (routing load).
    pending_jobs: Callable[[], int | None] = lambda: None
    os: NodeOs = msgspec.field(default_factory=read_os)
    fingerprint: str | None = None  # of the node's certificate

    def describe(self, *, trusted: bool = True) -> NodeInfo:
        """The payload as of now (cheap: reads only values kept in memory).

        Without ``trusted`` (a client neither a member over its pinned TLS nor this computer)
        only what pairing needs: the node's id, name, version, ports and certificate
        fingerprint. Hardware, the operating system's release, live load and ``pending_jobs``
        would tell a neighbour when the owner is using a model; inventories, what it runs.
        """
        if not trusted:
            return self.describe_public()
        view = self.telemetry()
        return NodeInfo(
            node_id=self.node_id,
            name=self.name(),
            version=self.version,
            os=self.os,
            cpu=view.cpu,
            memory=view.memory,
            gpus=view.gpus,
            telemetry_valid=view.valid,
            telemetry_age_ms=view.age_ms,
            ports=self.ports(),
            engines=dict(self.engine_models()),
            pending_jobs=self.pending_jobs(),
            fingerprint=self.fingerprint,
        )

    def describe_public(self) -> NodeInfo:
        """What anyone may read: identity, ports and fingerprint; every figure left blank
        (the wire shape stays, so older peers still read it: blanks mean unknown)."""
        return NodeInfo(
            node_id=self.node_id,
            name=self.name(),
            version=self.version,
            os=NodeOs(),
            cpu=NodeCpu(),
            memory=NodeMemory(),
            gpus=[],
            telemetry_valid=False,
            ports=self.ports(),
            fingerprint=self.fingerprint,
        )


def last_engine_models(engines: EnginesComponent | None) -> dict[str, NodeEngineModels]:
    """Running engines with the engine manager's last good model lists (no engine is asked).

    Peers poll node-info every few seconds; asking the engines each time would load them and
    let one slow engine stall the answer, so the watcher's lists are read instead. The slot
    counts are the ones this node's own routing table uses (peers place requests by them); the
    weights digests and sizes let members find replicas of one model under other names.
    """
    if engines is None:
        return {}
    counted = engines.last_slots()
    digests, sizes = engines.last_weights()
    found: dict[str, NodeEngineModels] = {}
    for name, (listed, loaded) in engines.last_models().items():
        controller = engines.controllers.get(name)
        slots = (
            routing_slots(
                controller.manifest.slots, controller.status().slots, counted.get(name, {})
            )
            if controller is not None
            else None
        )
        found[name] = NodeEngineModels(
            models=_copy(listed),
            loaded=_copy(loaded),
            slots=slots.slots if slots is not None else None,
            model_slots=dict(slots.per_model) if slots is not None and slots.per_model else None,
            digests=_listed_only(digests.get(EngineName(name)), listed),
            sizes=_listed_only(sizes.get(EngineName(name)), listed),
        )
    return found


def _listed_only(values: Mapping[str, T] | None, listed: list[str] | None) -> dict[str, T] | None:
    """``values`` of the models the engine lists now (None: nothing known); replicas are
    found by digest, and a member must not be sent a model it does not serve."""
    if not values or listed is None:
        return None
    kept = {model: values[model] for model in listed if model in values}
    return kept or None


def _copy(names: list[str] | None) -> list[str] | None:
    return list(names) if names is not None else None
