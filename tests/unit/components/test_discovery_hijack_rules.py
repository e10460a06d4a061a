"""A trusted member's addresses and model lists count only when they come over its pinned mutual
TLS: an announcement of a member is a hint to try, an anonymous answer in its name changes
nothing, and the address that last passed the handshake stays first (the relay dials it)."""

from __future__ import annotations

from backend.components.discovery.state import (
    Announced,
    Directory,
    InfoFetched,
    NodeUpdated,
    apply,
    dial_order,
)
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeEngineModels, NodeInfo
from tests.unit.components.discovery_rig import bare_info

MEMBER = NodeId("33333333-3333-4333-8333-333333333333")
REAL = "10.77.0.30"
SPOOF = "10.77.0.66"
MODELS = {"ollama": NodeEngineModels(models=["mistral:7b", "phi3:mini"], loaded=[])}
FAKE = {"ollama": NodeEngineModels(models=["gpt-oss:120b"], loaded=[])}


def _info(engines: dict[str, NodeEngineModels] | None, node_port: int = 14320) -> NodeInfo:
    ports = Ports(node=node_port, ollama=11434, openai=1234, llamacpp=8080, relay=14321)
    return bare_info(MEMBER, "alice-workstation", "0.1", ports, engines=engines)


def _member_known_at_real_address() -> Directory:
    fetched = InfoFetched(_info(MODELS), REAL, 1.0, source="mdns", authenticated=True, member=True)
    directory, _ = apply(Directory(), fetched)
    return directory


def test_an_announcement_of_a_member_at_a_new_address_is_a_hint_not_a_move() -> None:
    directory = _member_known_at_real_address()
    spoofed = Announced(MEMBER, (SPOOF,), {"node": 14320, "ol": 9}, 2.0, member=True)
    after, changes = apply(directory, spoofed)
    node = after.entries[MEMBER].node
    assert changes == []
    assert node.addresses == [REAL] and node.ports["node"] == 14320
    assert dial_order(after, MEMBER) == [REAL, SPOOF]  # tried after the proven one


def test_an_anonymous_answer_in_a_members_name_changes_nothing() -> None:
    directory = _member_known_at_real_address()
    for engines in (None, FAKE):  # wiped, or faked
        forged = InfoFetched(_info(engines, node_port=9999), SPOOF, 3.0, member=True)
        after, changes = apply(directory, forged)
        assert changes == [] and after == directory
        assert after.entries[MEMBER].node.engines == MODELS


def test_an_address_that_passed_the_pinned_handshake_goes_first_and_drops_the_hints() -> None:
    directory = _member_known_at_real_address()
    directory, _ = apply(directory, Announced(MEMBER, ("10.77.0.31",), {"node": 1}, 2.0, True))
    moved = InfoFetched(_info(MODELS), "10.77.0.31", 3.0, authenticated=True, member=True)
    directory, changes = apply(directory, moved)
    assert [type(c) for c in changes] == [NodeUpdated]
    assert directory.entries[MEMBER].node.addresses == ["10.77.0.31", REAL]
    assert directory.entries[MEMBER].hints == ()


def test_engines_of_an_unauthenticated_answer_are_never_listed() -> None:
    # A stranger (not a member) answered anonymously with engines it has no business sending.
    fetched = InfoFetched(_info(FAKE), SPOOF, 1.0, source="mdns")
    directory, _ = apply(Directory(), fetched)
    assert directory.entries[MEMBER].node.engines == {}


def test_a_stranger_announced_elsewhere_is_still_followed() -> None:
    fetched = InfoFetched(_info(None), REAL, 1.0, source="mdns")
    directory, _ = apply(Directory(), fetched)
    directory, _ = apply(directory, Announced(MEMBER, ("10.77.0.31",), {"node": 1}, 2.0))
    assert directory.entries[MEMBER].node.addresses == [REAL, "10.77.0.31"]
