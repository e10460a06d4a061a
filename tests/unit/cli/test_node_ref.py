"""``--node NAME|ID``: an exact id, a unique id prefix of 4+ characters or a name in any case;
this node means local; anything else is a usage error listing the nodes, and nothing is sent."""

from __future__ import annotations

import pytest

from backend.cli import exit_codes
from backend.cli.node_ref import (
    KnownNode,
    NodeDirectory,
    UnknownNode,
    fetch_directory,
    node_id_of,
    on_node,
    with_node,
)
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from tests.unit.cli.scripted import (
    ALICE,
    BOB,
    CAROL,
    ScriptedBroker,
    broker_status,
    cluster_status,
    member,
)


def _directory(*members: tuple[NodeId, str]) -> NodeDirectory:
    listed = members or ((BOB, "bob"), (CAROL, "carol"))
    return NodeDirectory.of(broker_status(), cluster_status(*(member(*m) for m in listed)))


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (BOB, BOB),  # the exact id
        (BOB.upper(), BOB),
        ("7b1d00", BOB),  # a unique prefix
        ("7b1d9", CAROL),
        ("0f3c", ALICE),  # four characters are enough
        ("bob", BOB),
        ("  CaRoL ", CAROL),  # any case, spaces around ignored
        ("ALICE", ALICE),
    ],
)
def test_a_node_is_found_by_id_prefix_or_name(given: str, expected: NodeId) -> None:
    assert _directory().resolve(given).node_id == expected


def test_this_node_and_nothing_given_mean_local() -> None:
    directory = _directory()
    assert directory.target(None) is None
    assert directory.target("alice") is None
    assert directory.target(ALICE[:6]) is None
    bob = directory.target("bob")
    assert bob == KnownNode(BOB, "bob")
    assert (node_id_of(bob), on_node(bob)) == (BOB, " on bob")
    assert (node_id_of(None), on_node(None)) == (None, "")


def test_an_unknown_node_lists_every_candidate_with_short_ids() -> None:
    with pytest.raises(UnknownNode) as caught:
        _directory().resolve("nosuch")
    message = str(caught.value)
    assert "no node is called 'nosuch'" in message
    assert "alice (0f3c2a9e, this node)" in message
    assert "bob (7b1d00c4)" in message and "carol (7b1d99f0)" in message
    assert BOB not in message  # 8-character ids, not whole ones


def test_an_ambiguous_prefix_names_the_nodes_it_matches() -> None:
    with pytest.raises(UnknownNode) as caught:
        _directory().resolve("7b1d")
    message = str(caught.value)
    assert "matches 2 nodes" in message and "bob (7b1d00c4)" in message
    assert "carol (7b1d99f0)" in message and "alice" not in message


def test_a_prefix_shorter_than_four_characters_is_not_enough() -> None:
    with pytest.raises(UnknownNode, match="at least 4 characters"):
        _directory().resolve("0f3")
    with pytest.raises(UnknownNode, match="no node is called '7'"):
        _directory().resolve("7")


def test_two_members_of_one_name_and_a_name_that_is_another_prefix_are_ambiguous() -> None:
    with pytest.raises(UnknownNode, match="matches 2 nodes"):
        _directory((BOB, "desk"), (CAROL, "Desk")).resolve("desk")
    with pytest.raises(UnknownNode, match="matches 2 nodes"):
        _directory((BOB, "7b1d99f0"), (CAROL, "carol")).resolve("7b1d99f0")
    # ... unless it is someone's whole id, which is never ambiguous
    assert _directory((BOB, "x"), (CAROL, BOB)).resolve(BOB).name == "x"


def test_this_node_listed_as_a_member_is_not_counted_twice() -> None:
    directory = _directory((ALICE, "alice"), (BOB, "bob"))
    assert [node.name for node in directory.nodes] == ["alice", "bob"]
    assert directory.resolve("0f3c").here
    assert directory.names() == {ALICE: "alice", BOB: "bob"}


def test_outside_a_cluster_only_this_node_is_known() -> None:
    directory = NodeDirectory.of(broker_status(), cluster_status())
    with pytest.raises(UnknownNode) as caught:
        directory.resolve("bob")
    assert "in no cluster" in str(caught.value)
    assert "the nodes: alice (0f3c2a9e, this node)" in str(caught.value)


async def test_the_directory_comes_from_status_and_cluster_status() -> None:
    broker = ScriptedBroker()
    directory = await fetch_directory(broker.peer)
    assert [n.describe() for n in directory.nodes] == [
        "alice (0f3c2a9e, this node)",
        "bob (7b1d00c4)",
        "carol (7b1d99f0)",
    ]
    broker.answer(methods.CLUSTER_STATUS.name, errors.Unavailable("cluster is not running"))
    directory = await fetch_directory(broker.peer)
    assert directory.members == ()
    with pytest.raises(UnknownNode, match=r"members are unknown \(cluster is not running\)"):
        directory.resolve("bob")


class Recorder:
    """The work a command would do, recording which member it was given."""

    def __init__(self) -> None:
        self.given: list[KnownNode | None] = []

    async def __call__(self, peer: RpcPeer, node: KnownNode | None) -> int:
        self.given.append(node)
        return exit_codes.OK


async def test_without_node_nothing_extra_is_asked() -> None:
    broker, work = ScriptedBroker(), Recorder()
    assert await with_node(None, work)(broker.peer) == exit_codes.OK
    assert (broker.calls, work.given) == ([], [None])


async def test_a_member_runs_the_work_for_it_and_this_node_runs_it_locally() -> None:
    broker, work = ScriptedBroker(), Recorder()
    assert await with_node("Bob", work)(broker.peer) == exit_codes.OK
    assert await with_node("alice", work)(broker.peer) == exit_codes.OK
    assert await with_node(ALICE[:4], work)(broker.peer) == exit_codes.OK
    assert work.given == [KnownNode(BOB, "bob"), None, None]
    assert set(broker.methods_called) == {methods.STATUS.name, methods.CLUSTER_STATUS.name}


async def test_an_unknown_node_is_a_usage_error_and_the_work_never_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker, work = ScriptedBroker(), Recorder()
    assert await with_node("nosuch", work)(broker.peer) == exit_codes.USAGE
    assert work.given == []
    assert broker.methods_called == [methods.STATUS.name, methods.CLUSTER_STATUS.name]
    err = capsys.readouterr().err
    assert err.startswith("pair: --node nosuch: no node is called 'nosuch'")
    assert "alice (0f3c2a9e, this node), bob (7b1d00c4), carol (7b1d99f0)" in err
