"""A stranger's node-info carries no figures (hardware, OS, load): discovery lists it and the GUI
shows it as a candidate, a probe answer and a card, each figure blank (unknown), never zero."""

from __future__ import annotations

from app.address import Address
from app.controllers.add_node import candidates, probe_result
from app.models.nodes import SelfDetails, build_card
from backend.components.discovery.state import Directory, InfoFetched, apply
from backend.components.nodeinfo.payload import NodeInfoSource
from backend.components.nodeinfo.telemetry import TelemetryView
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.cluster import NodeProbe
from backend.protocol.types.nodes import NodeCpu, NodeMemory, NodeOs

STRANGER = NodeId("44444444-4444-4444-8444-444444444444")
SOURCE = NodeInfoSource(
    node_id=STRANGER,
    version="0.2.0",
    ports=lambda: Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
    name=lambda: "neighbour",
    telemetry=lambda: TelemetryView(
        cpu=NodeCpu(name="secret", cores=8, utilization_percent=50.0),
        memory=NodeMemory(total_bytes=1, used_bytes=1),
        valid=True,
    ),
    pending_jobs=lambda: 4,
    os=NodeOs(system="Linux", release="6.18"),
    fingerprint="sha256:ab",
)


def test_a_strangers_blank_answer_is_listed_and_shown_as_unknown() -> None:
    info = SOURCE.describe(trusted=False)
    directory, _ = apply(Directory(), InfoFetched(info, "10.0.0.9", 1.0, source="mdns"))
    node = directory.entries[STRANGER].node
    assert node.telemetry is not None and not node.telemetry.valid
    assert node.telemetry.cpu_percent is None and node.telemetry.pending_jobs is None

    [candidate] = candidates([node], self_id=None, members=set(), cluster_id=None)
    assert candidate.address == Address("10.0.0.9", 14320) and candidate.name == "neighbour"
    assert candidate.gpu is None and candidate.system is None and candidate.version == "0.2.0"

    answer = probe_result(Address("10.0.0.9", 14320), NodeProbe(info=info, invitable=True), None)
    assert answer.message == "neighbour (PAIR 0.2.0) answers at 10.0.0.9:14320."

    card = build_card(node, SelfDetails())
    assert card.cpu_percent is None and card.memory_total_bytes is None and card.gpus == ()
    assert card.os is None and card.cpu_name is None and not card.telemetry_valid
