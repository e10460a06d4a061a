"""The routing table from this node's engines and the discovery list."""

from __future__ import annotations

import logging

import msgspec
import pytest

from backend.components.cluster.members import Member, Membership
from backend.components.proxy.table import (
    DEFAULT_RELAY_PORT,
    LocalEngine,
    TableSource,
    build_table,
    merged_loads,
    node_targets,
    timeout_from,
)
from backend.protocol.proxy import RouteTarget
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import (
    DiscoveredNode,
    NodeEngineModels,
    NodeKind,
    NodeSource,
    NodeTelemetry,
)

PEER_PORTS = {"node": 47800, "ollama": 47811, "openai": 47812, "llamacpp": 47813, "relay": 47821}


def _node(
    node_id: str = "peer-1",
    *,
    kind: NodeKind = "pair",
    addresses: list[str] | None = None,
    ports: dict[str, int] | None = None,
    engines: dict[str, list[str] | None] | None = None,
    sources: list[NodeSource] | None = None,
    reachable: bool = True,
) -> DiscoveredNode:
    listed = engines if engines is not None else {"ollama": ["llama3"]}
    return DiscoveredNode(
        node_id=node_id,
        name=f"{node_id} name",
        kind=kind,
        sources=sources if sources is not None else ["mdns"],
        addresses=addresses if addresses is not None else ["127.0.0.1"],
        ports=ports if ports is not None else dict(PEER_PORTS),
        engines={name: NodeEngineModels(models=models) for name, models in listed.items()},
        reachable=reachable,
    )


def _member(
    node_id: str = "peer-1", *, provisional: bool = False, address: str = "192.168.1.9"
) -> Member:
    return Member(
        node_id=NodeId(node_id),
        name=f"{node_id} name",
        cert_der=f"certificate of {node_id}".encode(),
        fingerprint=f"sha256:{node_id}",
        added_by=NodeId("me"),
        added_at=1.0,
        address=address,
        node_port=47800,
        provisional=provisional,
    )


def _members(*members: Member) -> dict[str, Member]:
    return {member.node_id: member for member in members}


def _membership(*node_ids: str) -> Membership:
    return Membership(cluster_id="c", members={NodeId(n): _member(n) for n in node_ids})


TRUSTED = _members(_member())


def test_a_paired_peer_offers_each_engine_at_its_relay_port_over_tls() -> None:
    node = _node(engines={"ollama": ["llama3"], "lmstudio": ["qwen"], "llamacpp": ["phi"]})
    found = node_targets(node, TRUSTED)
    assert found == {
        engine: RouteTarget(
            node_id="peer-1",
            kind="peer",
            base_url="https://127.0.0.1:47821",
            name="peer-1 name",
            models=[model],
            cert_der=b"certificate of peer-1",
        )
        for engine, model in (("ollama", "llama3"), ("lmstudio", "qwen"), ("llamacpp", "phi"))
    }


def test_an_unpaired_or_provisional_node_is_never_a_target_even_on_loopback() -> None:
    assert node_targets(_node()) == {}
    assert node_targets(_node(), _members(_member("someone-else"))) == {}
    assert node_targets(_node(), _members(_member(provisional=True))) == {}


@pytest.mark.parametrize(
    ("addresses", "host"),
    [
        (["192.168.1.20", "127.0.0.2"], "192.168.1.20"),
        (["fe80::1", "10.0.0.5"], "[fe80::1]"),
        (["localhost"], "localhost"),
    ],
)
def test_a_paired_peer_is_dialled_at_the_first_address_discovery_lists(
    addresses: list[str], host: str
) -> None:
    target = node_targets(_node(addresses=addresses), TRUSTED)["ollama"]
    assert target.base_url == f"https://{host}:47821"


def test_a_paired_peer_without_a_listed_address_is_dialled_where_it_was_paired() -> None:
    target = node_targets(_node(addresses=[]), TRUSTED)["ollama"]
    assert target.base_url == "https://192.168.1.9:47821"


def test_a_peer_that_names_no_relay_port_is_dialled_at_the_default_one() -> None:
    ports = {k: v for k, v in PEER_PORTS.items() if k != "relay"}
    target = node_targets(_node(ports=ports), TRUSTED)["ollama"]
    assert target.base_url == f"https://127.0.0.1:{DEFAULT_RELAY_PORT}" == "https://127.0.0.1:14321"


def test_a_peer_engine_no_door_serves_is_skipped() -> None:
    node = _node(engines={"ollama": ["llama3"], "vllm": ["x"]})
    assert list(node_targets(node, TRUSTED)) == ["ollama"]


def test_a_peer_engine_not_listed_yet_offers_no_models() -> None:
    assert node_targets(_node(engines={"ollama": None}), TRUSTED)["ollama"].models == []


def test_an_engine_only_node_is_dialled_at_its_address_and_engine_port() -> None:
    node = _node(
        "engine:192.168.1.7:11434",
        kind="engine",
        sources=["manual"],
        addresses=["192.168.1.7"],
        ports={"ollama": 11434},
        engines={"ollama": ["llama3", "qwen"]},
    )
    target = node_targets(node)["ollama"]
    assert (target.kind, target.base_url, target.models) == (
        "engine",
        "http://192.168.1.7:11434",
        ["llama3", "qwen"],
    )


def test_an_ipv6_engine_only_node_is_bracketed() -> None:
    node = _node(
        kind="engine", addresses=["fd00::7"], ports={"llamacpp": 8080}, engines={"llamacpp": []}
    )
    assert node_targets(node)["llamacpp"].base_url == "http://[fd00::7]:8080"


def test_an_engine_only_node_without_an_address_or_port_offers_nothing() -> None:
    no_address = _node(kind="engine", addresses=[], ports={"ollama": 11434})
    no_port = _node(kind="engine", addresses=["192.168.1.7"], ports={"lmstudio": 1234})
    assert node_targets(no_address) == {}
    assert node_targets(no_port) == {}


def test_this_node_and_unreachable_nodes_offer_nothing() -> None:
    assert node_targets(_node(sources=["self", "mdns"]), TRUSTED) == {}
    assert node_targets(_node(reachable=False), TRUSTED) == {}


def test_local_engines_come_first_then_other_nodes_by_id() -> None:
    table = build_table(
        node_id="me",
        local={"ollama": LocalEngine("http://127.0.0.1:11434", ["llama3"], slots=4)},
        nodes=[_node("peer-z"), _node("me", sources=["mdns"]), _node("peer-a")],
        loads={"peer-a": 2},
        generation=7,
        membership=_membership("peer-a", "peer-z"),
    )
    targets = table.engines["ollama"]
    assert [(t.node_id, t.kind) for t in targets] == [
        ("me", "local"),
        ("peer-a", "peer"),
        ("peer-z", "peer"),
    ]
    assert (targets[0].base_url, targets[0].models, targets[0].slots) == (
        "http://127.0.0.1:11434",
        ["llama3"],
        4,
    )
    assert (table.node_id, table.generation, table.loads) == ("me", 7, {"peer-a": 2})


def test_local_slots_are_at_least_one() -> None:
    table = build_table(
        node_id="me",
        local={"ollama": LocalEngine("http://127.0.0.1:11434", [], slots=0)},
        nodes=[],
        loads={},
        generation=1,
    )
    assert table.engines["ollama"][0].slots == 1


def test_an_engine_only_other_nodes_run_is_in_the_table() -> None:
    table = build_table(
        node_id="me",
        local={"ollama": LocalEngine("http://127.0.0.1:11434", [])},
        nodes=[_node(engines={"lmstudio": ["qwen"]})],
        loads={},
        generation=1,
        membership=_membership("peer-1"),
    )
    assert sorted(table.engines) == ["lmstudio", "ollama"]
    assert [t.kind for t in table.engines["lmstudio"]] == ["peer"]


def test_pins_are_set_for_every_engine_only_when_a_node_is_pinned() -> None:
    def table(pinned: str) -> dict[str, str]:
        return build_table(
            node_id="me",
            local={"ollama": LocalEngine("http://127.0.0.1:11434", [])},
            nodes=[_node(engines={"lmstudio": ["qwen"]})],
            loads={},
            generation=1,
            pinned=pinned,
            membership=_membership("peer-1"),
        ).pins

    assert table("") == {}
    assert table("peer-1") == {"ollama": "peer-1", "lmstudio": "peer-1"}


def test_the_table_trusts_exactly_the_final_members_and_routes_only_to_them() -> None:
    membership = Membership(
        cluster_id="c",
        members={
            NodeId("peer-a"): _member("peer-a"),
            NodeId("peer-b"): _member("peer-b", provisional=True),
            NodeId("peer-c"): _member("peer-c"),
        },
        removed=frozenset({"sha256:peer-c"}),  # tombstoned: never trusted again
    )
    table = build_table(
        node_id="me",
        local={},
        nodes=[_node("peer-a"), _node("peer-b"), _node("peer-c"), _node("stranger")],
        loads={},
        generation=1,
        membership=membership,
    )
    assert table.trusted == [b"certificate of peer-a"]
    assert [t.node_id for t in table.engines["ollama"]] == ["peer-a"]


def test_without_a_cluster_the_table_has_no_peers_and_trusts_nobody() -> None:
    table = build_table(node_id="me", local={}, nodes=[_node("peer-a")], loads={}, generation=1)
    assert (table.engines, table.trusted) == ({}, [])


def test_timeouts_are_carried_into_the_table() -> None:
    table = build_table(
        node_id="me",
        local={},
        nodes=[],
        loads={},
        generation=1,
        header_timeout_s=5.0,
        first_content_timeout_s=9.0,
    )
    assert (table.header_timeout_s, table.first_content_timeout_s) == (5.0, 9.0)


class _World:
    """What the table source reads, changed by the test between calls."""

    def __init__(self) -> None:
        self.loads: dict[str, int] = {}
        self.nodes: list[DiscoveredNode] = []
        self.pinned = ""
        self.membership = _membership("peer-a")

    def source(self) -> TableSource:
        return TableSource(
            node_id=lambda: "me",
            local=lambda: {"ollama": LocalEngine("http://127.0.0.1:11434", ["llama3"])},
            nodes=lambda: self.nodes,
            loads=lambda: self.loads,
            timeouts=lambda: (3.0, 4.0),
            pinned=lambda: self.pinned,
            members=lambda: self.membership,
        )


def test_the_generation_moves_only_when_the_loads_change() -> None:
    world = _World()
    source = world.source()
    assert source().generation == 1
    assert source().generation == 1
    world.nodes = [_node("peer-a")]
    assert source().generation == 1  # a new node alone is not a new load snapshot
    world.loads = {"peer-a": 1}
    assert source().generation == 2
    world.loads = {"peer-a": 1}
    assert source().generation == 2
    world.loads = {}
    assert source().generation == 3


def test_the_source_builds_from_what_it_reads_now() -> None:
    world = _World()
    source = world.source()
    world.nodes = [_node("peer-a")]
    world.loads = {"peer-a": 3}
    world.pinned = "peer-a"
    table = source()
    assert [t.node_id for t in table.engines["ollama"]] == ["me", "peer-a"]
    assert (table.loads, table.pins) == ({"peer-a": 3}, {"ollama": "peer-a"})
    assert (table.header_timeout_s, table.first_content_timeout_s) == (3.0, 4.0)
    # The table holds its own copy: later changes to the loads do not reach it.
    world.loads["peer-a"] = 9
    assert table.loads == {"peer-a": 3}


def test_timeout_from_uses_a_positive_environment_value() -> None:
    assert timeout_from(120.0, {"T": "30"}, "T") == 30.0
    assert timeout_from(120.0, {"T": "0.5"}, "T") == 0.5
    assert timeout_from(120.0, {"OTHER": "30"}, "T") == 120.0


@pytest.mark.parametrize("text", ["0", "-5", "abc", "", "1,2"])
def test_timeout_from_falls_back_to_the_setting_on_a_bad_value(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert timeout_from(120.0, {"T": text}, "T") == 120.0
    assert "T=" in caplog.text


def test_timeout_from_falls_back_on_nan() -> None:
    assert timeout_from(120.0, {"T": "nan"}, "T") == 120.0


def test_a_peers_reported_pending_work_counts_when_it_is_more_than_ours() -> None:
    reported = [
        _with_pending(_node("busy"), 7),
        _with_pending(_node("quiet"), 0),
        _node("silent"),  # an older node that reports nothing
        _with_pending(_node("me", sources=["self"]), 50),
    ]
    own = {"busy": 2, "quiet": 3, "silent": 1, "me": 4}
    assert merged_loads(own, reported) == {"busy": 7, "quiet": 3, "silent": 1, "me": 4}


def _with_pending(node: DiscoveredNode, pending: int) -> DiscoveredNode:
    return msgspec.structs.replace(node, telemetry=NodeTelemetry(valid=True, pending_jobs=pending))
