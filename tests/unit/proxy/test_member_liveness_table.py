"""The routing table follows the member links: a member's engines are targets only while its
link is up, whatever discovery says (an mDNS record still arriving from a member whose TCP is
dead), and a member whose link comes back is a target again at once, even after discovery
dropped it during the outage."""

from __future__ import annotations

from collections.abc import Collection

from backend.components.cluster.members import Member, Membership
from backend.components.proxy.linked import MemberInventory
from backend.components.proxy.table import LocalEngine, TableSource, build_table, node_targets
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels, NodeKind

PORTS = {"node": 47800, "relay": 47821, "ollama": 47811}


def _node(node_id: str = "b", *, reachable: bool = True, kind: NodeKind = "pair") -> DiscoveredNode:
    return DiscoveredNode(
        node_id=NodeId(node_id),
        name=f"{node_id} name",
        kind=kind,
        sources=["mdns"] if kind == "pair" else ["manual"],
        addresses=["192.168.1.20"],
        ports=dict(PORTS),
        engines={"ollama": NodeEngineModels(models=["llama3"])},
        reachable=reachable,
    )


def _member(node_id: str = "b") -> Member:
    return Member(
        node_id=NodeId(node_id),
        name=f"{node_id} name",
        cert_der=f"certificate of {node_id}".encode(),
        fingerprint=f"sha256:{node_id}",
        added_by=NodeId("me"),
        added_at=1.0,
        address="192.168.1.20",
        node_port=47800,
    )


MEMBERS = {NodeId("b"): _member("b")}


def test_a_member_whose_link_is_down_is_no_target_although_discovery_still_sees_it() -> None:
    assert node_targets(_node(reachable=True), MEMBERS, linked=frozenset()) == {}


def test_a_linked_member_is_a_target_even_while_discovery_cannot_poll_it() -> None:
    found = node_targets(_node(reachable=False), MEMBERS, linked={"b"})
    assert found["ollama"].base_url == "https://192.168.1.20:47821"


def test_without_links_given_discovery_decides_as_before() -> None:
    assert node_targets(_node(reachable=True), MEMBERS)["ollama"].node_id == "b"
    assert node_targets(_node(reachable=False), MEMBERS) == {}


def test_an_engine_added_by_address_does_not_need_a_link() -> None:
    engine = _node("manual-1", kind="engine")
    assert node_targets(engine, {}, linked=frozenset())["ollama"].kind == "engine"


def test_build_table_lists_only_linked_members() -> None:
    membership = Membership(cluster_id="c", members={NodeId("b"): _member("b")})

    def table(linked: set[str]) -> list[str]:
        built = build_table(
            node_id="me",
            local={},
            nodes=[_node("b")],
            loads={},
            generation=1,
            membership=membership,
            linked=linked,
        )
        return [target.node_id for target in built.engines.get("ollama", [])]

    assert table(set()) == []
    assert table({"b"}) == ["b"]


class _World:
    def __init__(self) -> None:
        self.nodes: list[DiscoveredNode] = [_node("b")]
        self.linked: set[str] = set()
        self.membership = Membership(cluster_id="c", members={NodeId("b"): _member("b")})

    def source(self) -> TableSource:
        def linked() -> Collection[str]:
            return frozenset(self.linked)

        return TableSource(
            node_id=lambda: "me",
            local=lambda: {"ollama": LocalEngine("http://127.0.0.1:11434", ["phi3"])},
            nodes=lambda: self.nodes,
            loads=dict,
            timeouts=lambda: (3.0, 4.0),
            members=lambda: self.membership,
            linked=linked,
        )


def _peers(source: TableSource) -> list[str]:
    return [t.node_id for t in source().engines.get("ollama", []) if t.kind == "peer"]


def test_a_member_is_a_target_from_the_moment_its_link_is_up_and_away_once_it_is_down() -> None:
    world = _World()
    source = world.source()
    assert _peers(source) == [], "paired and announced, but not linked yet"
    world.linked = {"b"}
    assert _peers(source) == ["b"]
    world.linked = set()
    table = source()
    assert _peers(source) == []
    assert [(a.node_id, a.models) for a in table.away] == [("b", ["llama3"])]


def test_a_member_discovery_dropped_during_an_outage_is_a_target_again_once_linked() -> None:
    world = _World()
    source = world.source()
    world.linked = {"b"}
    assert _peers(source) == ["b"]
    world.linked, world.nodes = set(), []  # the link died, then its mDNS record expired
    assert _peers(source) == []
    world.linked = {"b"}  # the link is back before discovery finds it again
    assert _peers(source) == ["b"]


def test_the_last_entry_of_a_node_that_is_no_longer_a_member_is_forgotten() -> None:
    inventory = MemberInventory()
    node = _node("b")
    assert inventory.complete([node], {"b"}) == [node]
    assert inventory.complete([], {"b"}) == [node]
    assert inventory.complete([], set()) == []
    assert inventory.complete([], {"b"}) == []
