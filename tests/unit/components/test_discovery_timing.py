"""Discovery's timing knobs: each hidden environment variable shortens its own interval."""

from __future__ import annotations

from backend.components.discovery.timing import DiscoveryTiming


def test_the_interface_check_interval_follows_its_knob_and_ignores_a_bad_value() -> None:
    assert DiscoveryTiming.from_environment({}).interface_interval == 10.0
    knob = "PAIR_DISCOVERY_INTERFACE_INTERVAL"
    assert DiscoveryTiming.from_environment({knob: "1"}).interface_interval == 1.0
    assert DiscoveryTiming.from_environment({knob: "0"}).interface_interval == 10.0
    assert DiscoveryTiming.from_environment({knob: "soon"}).interface_interval == 10.0
