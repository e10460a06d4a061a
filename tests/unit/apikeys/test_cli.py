"""``pair api-key``: the secret once, with the settings a client on another computer uses."""

from __future__ import annotations

import pytest

from backend.cli.apikey_commands import NO_ADDRESS, format_created, format_keys, lan_address
from backend.cli.main import build_parser
from backend.protocol.types.apikeys import ApiKeyCreated, ApiKeyId, ApiKeyInfo
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import BrokerStatus, Ports
from backend.protocol.types.nodes import DiscoveredNode, NodeSource

KEY = ApiKeyInfo(id=ApiKeyId("1a2b3c4d"), name="laptop", prefix="pair-AbCd", created_at=100.0)
CREATED = ApiKeyCreated(key=KEY, secret="pair-AbCdSECRET")
PORTS = Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080)


def _status() -> BrokerStatus:
    return BrokerStatus(
        version="0",
        pid=1,
        started_at=0.0,
        uptime_ms=0,
        data_dir="/d",
        node_id=NodeId("n"),
        node_name="desk",
        control_address="/s",
        log_file=None,
        ports=PORTS,
        components=[],
        errors=[],
    )


def _node(sources: list[NodeSource], addresses: list[str]) -> DiscoveredNode:
    return DiscoveredNode(
        node_id=NodeId("n"),
        name="n",
        kind="pair",
        sources=sources,
        addresses=addresses,
        ports={},
        engines={},
        reachable=True,
    )


def test_create_prints_the_secret_and_every_apis_client_settings() -> None:
    text = format_created(CREATED, _status(), "192.168.1.5", lan_access=True)
    assert text.count("pair-AbCdSECRET") == 4
    assert "OLLAMA_HOST=http://192.168.1.5:11434" in text
    assert "Authorization: Bearer pair-AbCdSECRET" in text
    assert "OPENAI_BASE_URL=http://192.168.1.5:1234/v1" in text
    assert "OPENAI_API_KEY=pair-AbCdSECRET" in text
    assert "ANTHROPIC_BASE_URL=http://192.168.1.5:11434  ANTHROPIC_API_KEY=pair-AbCdSECRET" in text
    assert "pair api-key lan on" not in text
    off = format_created(CREATED, _status(), None, lan_access=False)
    assert f"OLLAMA_HOST=http://{NO_ADDRESS}:11434" in off and "pair api-key lan on" in off
    assert "http://[fd00::5]:11434" in format_created(
        CREATED, _status(), "fd00::5", lan_access=True
    )


def test_the_address_is_the_first_one_this_computer_advertises_else_its_best_interface() -> None:
    nodes = [_node(["mdns"], ["10.0.0.9"]), _node(["self"], ["192.168.1.5", "100.64.0.2"])]
    interfaces = {"lo": ["127.0.0.1"], "docker0": ["172.17.0.1"], "wlan0": ["192.168.1.7"]}
    assert lan_address(nodes, interfaces) == "192.168.1.5"
    unannounced = [_node(["self"], ["127.0.0.1"])]  # mDNS off: self is known on loopback only
    assert lan_address(unannounced, interfaces) == "192.168.1.7"
    assert lan_address(unannounced, {"lo": ["127.0.0.1"]}) is None


def test_list_shows_prefixes_never_secrets() -> None:
    text = format_keys([KEY], now=100.0 + 7200)
    assert "1a2b3c4d" in text and "laptop" in text and "pair-AbCd…" in text and "2h ago" in text
    assert "pair api-key create" in format_keys([], now=0.0)


def test_the_commands_parse() -> None:
    parser = build_parser()
    created = parser.parse_args(["api-key", "create", "my laptop", "--data-dir", "/x"])
    assert (created.apikey_action, created.name, created.data_dir) == ("create", "my laptop", "/x")
    assert parser.parse_args(["api-key", "list", "--json"]).json is True
    assert parser.parse_args(["api-key", "revoke", "1a2b3c4d"]).id == "1a2b3c4d"


def test_lan_access_is_turned_on_and_off_by_name() -> None:
    parsed = build_parser().parse_args(["api-key", "lan", "on"])
    assert (parsed.apikey_action, parsed.state) == ("lan", "on")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["api-key", "lan", "maybe"])
