"""What the routing table carries for placement: peers' slots and resident models from their
node-info, each node's GPU sample, the placement setting."""

from __future__ import annotations

import pytest

from backend.components.proxy.table import TableSource, build_table, gpu_samples, node_targets
from backend.components.settings.schema import defaults, validate
from backend.components.settings.view import SettingsView
from backend.protocol.proxy import GpuSample
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels, NodeTelemetry
from tests.unit.proxy.test_table import TRUSTED, _node


def test_a_peers_slots_and_resident_models_come_from_its_node_info() -> None:
    node = _node().__replace__(
        engines={
            "ollama": NodeEngineModels(
                models=["a", "b"], loaded=["a"], slots=4, model_slots={"b": 2, "c": 0}
            )
        }
    )
    target = node_targets(node, TRUSTED)["ollama"]
    assert (target.slots, target.model_slots) == (4, {"b": 2})
    assert (target.resident, target.resident_known) == (["a"], True)


def test_a_peer_that_does_not_say_has_one_slot_and_unknown_residency() -> None:
    target = node_targets(_node(), TRUSTED)["ollama"]
    assert (target.slots, target.resident_known) == (1, False)


def _seen(
    node: DiscoveredNode, telemetry: NodeTelemetry | None, last_seen: float
) -> DiscoveredNode:
    return node.__replace__(telemetry=telemetry, last_seen=last_seen)


def test_gpu_samples_are_the_valid_ones_dated_when_the_node_was_seen() -> None:
    nodes = [
        _seen(_node("a"), NodeTelemetry(valid=True, gpu_percent=72.0), 100.0),
        _seen(_node("b"), NodeTelemetry(valid=False, gpu_percent=10.0), 100.0),
        _seen(_node("c"), NodeTelemetry(valid=True), 100.0),  # no GPU
        _seen(_node("d"), None, 100.0),
    ]
    assert gpu_samples(nodes) == {"a": GpuSample(percent=72.0, sampled_at=100.0)}
    table = build_table(node_id="me", local={}, nodes=nodes, loads={}, generation=1)
    assert set(table.gpu) == {"a"}
    assert table.placement == "pair"


def test_the_table_carries_the_placement_setting() -> None:
    source = TableSource(
        node_id=lambda: "me",
        local=dict,
        nodes=list,
        loads=dict,
        timeouts=lambda: (1.0, 1.0),
        placement=lambda: "reference",
    )
    assert source().placement == "reference"


def test_the_placement_setting_is_pair_or_reference() -> None:
    assert SettingsView.of(defaults()).placement_policy == "pair"
    assert validate("placement_policy", "reference") == "reference"
    with pytest.raises(ValueError, match="must be one of pair, reference; got 'fastest'"):
        validate("placement_policy", "fastest")
    with pytest.raises(ValueError, match="expects a string"):
        validate("placement_policy", 1)
