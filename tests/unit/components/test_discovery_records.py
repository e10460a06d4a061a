"""TXT records (ours and malformed peers'), address ranking, manual-node rules, engine probes."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from backend.components.discovery import manual
from backend.components.discovery.probe import classify_engine
from backend.components.discovery.records import (
    MalformedRecord,
    instance_name_label,
    parse_properties,
    rank_addresses,
    service_properties,
)
from backend.protocol import errors
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import ManualNode, ManualNodeAdd

NODE = "11111111-1111-4111-8111-111111111111"
PORTS = Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080)


def encoded(properties: dict[str, str]) -> dict[bytes, bytes | None]:
    return {key.encode(): value.encode() for key, value in properties.items()}


def test_our_record_parses_back() -> None:
    properties = service_properties(NODE, PORTS, ["10.0.0.2", "192.168.1.4"])
    assert list(properties)[:4] == ["v", "uuid", "cluster", "ips"]
    parsed = parse_properties(encoded(properties))
    assert parsed.node_id == NODE and parsed.cluster_id == ""
    assert parsed.addresses == ("10.0.0.2", "192.168.1.4")
    assert parsed.ports == {"node": 14320, "ollama": 11434, "openai": 1234, "llamacpp": 8080}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"v": "2"}, "version"),
        ({"v": ""}, "version"),
        ({"uuid": "not-a-uuid"}, "not a UUID"),
        ({"uuid": ""}, "not a UUID"),
        ({"ni": "99999"}, "not a port"),
        ({"ni": "-1"}, "not a port"),
        ({"ol": "abc"}, "not a port"),
        ({"ips": "10.0.0.1,nonsense"}, "not an IP"),
    ],
)
def test_malformed_records_are_refused_with_a_reason(change: dict[str, str], reason: str) -> None:
    properties = {**service_properties(NODE, PORTS, ["10.0.0.2"]), **change}
    with pytest.raises(MalformedRecord, match=reason):
        parse_properties(encoded(properties))


def test_records_without_a_node_port_or_with_binary_junk_are_refused() -> None:
    properties = encoded(service_properties(NODE, PORTS, []))
    del properties[b"ni"]
    with pytest.raises(MalformedRecord, match="node API port"):
        parse_properties(properties)
    with pytest.raises(MalformedRecord, match="UTF-8"):
        parse_properties({b"v": b"1", b"uuid": b"\xff\xfe"})
    valueless: dict[bytes, bytes | None] = {
        **encoded(service_properties(NODE, PORTS, [])),
        b"x": None,
    }
    assert parse_properties(valueless).node_id == NODE


def test_more_than_four_addresses_are_cut_to_four() -> None:
    properties = service_properties(NODE, PORTS, [])
    properties["ips"] = ",".join(f"10.0.0.{n}" for n in range(1, 9))
    assert len(parse_properties(encoded(properties)).addresses) == 4


def test_addresses_rank_lan_first_and_skip_virtual_loopback_and_link_local() -> None:
    interfaces = {
        "lo": ["127.0.0.1"],
        "docker0": ["172.17.0.1"],
        "br-1234": ["172.18.0.1"],
        "veth9": ["10.9.9.9"],
        "virbr0": ["192.168.122.1"],
        "tailscale0": ["100.101.102.103"],
        "eth1": ["8.8.4.4"],
        "eth0": ["192.168.1.20", "169.254.3.3", "fe80::1"],
        "wlan0": ["10.0.0.7"],
    }
    assert rank_addresses(interfaces) == ["192.168.1.20", "10.0.0.7", "100.101.102.103", "8.8.4.4"]
    many = {f"eth{n}": [f"10.0.{n}.1"] for n in range(8)}
    assert len(rank_addresses(many)) == 4


def test_instance_names_are_unique_per_node_and_hold_no_dots() -> None:
    assert instance_name_label("my.host", NODE) == "my-host (11111111)"
    assert len(instance_name_label("x" * 300, NODE)) < 63


def test_manual_input_is_validated_with_clear_messages() -> None:
    assert manual.validate(ManualNodeAdd(address=" [fd00::1] ")).address == "fd00::1"
    assert manual.validate(ManualNodeAdd(address="FD00::1")).address == "fd00::1"
    assert manual.validate(ManualNodeAdd(address="fe80::1%eth0")).address == "fe80::1%eth0"
    assert manual.validate(ManualNodeAdd(address="gpu-box.tailnet.ts.net", port=1)).port == 1
    for bad, message in [
        (ManualNodeAdd(address="  "), "give the other computer's address"),
        (ManualNodeAdd(address="10.0.0.1", port=0), "outside 1-65535"),
        (ManualNodeAdd(address="10.0.0.1", port=70000), "outside 1-65535"),
        (ManualNodeAdd(address="http://x/y"), "without http:// or a path"),
        # A client may send anything: a port in the address is never taken for part of the host.
        (
            ManualNodeAdd(address="10.0.0.5:14320"),
            '"10.0.0.5:14320" is not an address: the port goes separately',
        ),
        (ManualNodeAdd(address="[::1]:14320"), "the port goes separately"),
        (ManualNodeAdd(address="[::1"), "close the IPv6 address with ]"),
        (ManualNodeAdd(address="a b"), "no spaces in an address"),
        (ManualNodeAdd(address="gpu_box"), "not an address or a host name"),
    ]:
        with pytest.raises(errors.InvalidParams, match=re.escape(message)) as caught:
            manual.validate(bad)
        assert caught.value.code == -32602
        assert "Invalid params" not in caught.value.message  # a user reads it


def test_three_failed_probes_raise_the_error_and_an_answer_clears_it() -> None:
    node = ManualNode(id="manual:h:1", address="h", port=1, added_at=0.0, state="probing")
    transitions = []
    for _ in range(4):
        after = manual.after_probe(node, manual.NoAnswer("refused"), 1.0)
        transitions.append(manual.error_transition(node, after))
        node = after
    assert transitions == [None, None, True, None]
    assert node.state == "unreachable" and node.failures == 4 and node.last_error == "refused"
    after = manual.after_probe(node, manual.PairAnswered(NODE), 2.0)
    assert manual.error_transition(node, after) is False
    assert after.state == "pair" and after.node_id == NODE and after.failures == 0
    engine = manual.after_probe(after, manual.EngineAnswered("ollama"), 3.0)
    assert engine.state == "engine" and engine.node_id == "manual:h:1"


OLLAMA_TAGS = {"models": [{"name": "llama3.2"}, {"name": "qwen2.5:0.5b"}, {"bad": 1}]}
OPENAI_MODELS = {"object": "list", "data": [{"id": "m1"}, {"id": 2}, "junk"]}


@pytest.mark.parametrize(
    ("answers", "engine", "models", "loaded"),
    [
        (
            {
                "/api/version": {"version": "0.5.1"},
                "/api/tags": OLLAMA_TAGS,
                "/api/ps": {"models": [{"name": "llama3.2"}]},
                "/v1/models": OPENAI_MODELS,
            },
            "ollama",
            ["llama3.2", "qwen2.5:0.5b"],
            ["llama3.2"],
        ),
        (
            {"/lmstudio-greeting": {"lmstudio": True}, "/v1/models": OPENAI_MODELS},
            "lmstudio",
            ["m1"],
            None,
        ),
        ({"/health": {"status": "ok"}, "/v1/models": OPENAI_MODELS}, "llamacpp", ["m1"], ["m1"]),
        ({"/v1/models": OPENAI_MODELS}, "openai", ["m1"], None),
    ],
)
def test_bare_engines_are_told_apart(
    answers: dict[str, Any], engine: str, models: list[str], loaded: list[str] | None
) -> None:
    found = classify_engine(answers)
    assert found is not None and found.engine == engine
    assert found.models.models == models and found.models.loaded == loaded


@pytest.mark.parametrize(
    "answers",
    [
        {},
        {"/api/version": {"version": 5}},
        {"/api/version": "0.5"},
        {"/health": {"status": "ok"}},
        {"/v1/models": {"data": "nope"}},
        {"/lmstudio-greeting": {"lmstudio": "yes"}},
    ],
)
def test_nothing_engine_like_is_no_engine(answers: dict[str, Any]) -> None:
    assert classify_engine(answers) is None


def test_manual_node_wire_shape() -> None:
    node = ManualNode(id="manual:h:1", address="h", port=1, added_at=0.0, state="probing")
    assert msgspec.json.decode(msgspec.json.encode(node)) == {
        "id": "manual:h:1",
        "address": "h",
        "port": 1,
        "added_at": 0.0,
        "state": "probing",
    }
