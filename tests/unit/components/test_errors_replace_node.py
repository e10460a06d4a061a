"""``replace_node``: another member's errors, mirrored as its link sends them, replace exactly
that node's entries (this node's and third nodes' stay), entries in the list tagged with
another node are ignored, a push goes out only on a real change, and this node's own id is
refused (its errors are its own)."""

from __future__ import annotations

import pytest

from backend.components.errors import state
from backend.components.errors.registry import ErrorsRegistry
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ErrorReport, ServiceError
from tests.fakes import FakeClock

SELF = NodeId("self")
PEER = NodeId("peer")
THIRD = NodeId("third")


def entry(error_id: str, node: NodeId, message: str = "broken", at: float = 10.0) -> ServiceError:
    return ServiceError(id=error_id, node_id=node, message=message, created_at=at, updated_at=at)


def registry() -> tuple[ErrorsRegistry, list[list[ServiceError]]]:
    pushes: list[list[ServiceError]] = []
    return ErrorsRegistry(node_id=SELF, clock=FakeClock(), on_update=pushes.append), pushes


def keys(entries: list[ServiceError]) -> list[tuple[str, str]]:
    return [(e.node_id, e.id) for e in entries]


def test_the_state_replaces_exactly_that_nodes_entries() -> None:
    before: state.ErrorState = {
        (SELF, "a"): entry("a", SELF),
        (PEER, "a"): entry("a", PEER),
        (PEER, "old"): entry("old", PEER),
        (THIRD, "a"): entry("a", THIRD),
    }
    after = state.replace_node(before, PEER, [entry("a", PEER, "changed"), entry("new", PEER)])
    assert after == {
        (SELF, "a"): entry("a", SELF),
        (PEER, "a"): entry("a", PEER, "changed"),
        (PEER, "new"): entry("new", PEER),
        (THIRD, "a"): entry("a", THIRD),
    }
    assert state.replace_node(before, PEER, []) == {
        (SELF, "a"): entry("a", SELF),
        (THIRD, "a"): entry("a", THIRD),
    }
    assert (PEER, "a") in before, "the state given is not changed"


def test_the_state_ignores_entries_tagged_with_another_node() -> None:
    before: state.ErrorState = {(SELF, "a"): entry("a", SELF), (THIRD, "t"): entry("t", THIRD)}
    sent = [entry("p", PEER), entry("a", SELF, "forged"), entry("t", THIRD, "forged")]
    after = state.replace_node(before, PEER, sent)
    assert after == {**before, (PEER, "p"): entry("p", PEER)}
    assert state.replace_node(before, PEER, [entry("a", SELF, "forged")]) is None


def test_the_state_is_none_when_nothing_changes() -> None:
    before: state.ErrorState = {(PEER, "a"): entry("a", PEER), (SELF, "a"): entry("a", SELF)}
    assert state.replace_node(before, PEER, [entry("a", PEER)]) is None
    assert state.replace_node({}, PEER, []) is None
    assert state.replace_node(before, PEER, [entry("a", PEER, at=11.0)]) is not None


def test_the_registry_replaces_the_members_entries_and_keeps_its_own() -> None:
    errors, pushes = registry()
    errors.report(ErrorReport(id="local", message="this node's"))
    errors.report(ErrorReport(id="x", message="third's", node_id=THIRD, timestamp=5.0))
    errors.replace_node(PEER, [entry("b", PEER), entry("a", PEER)])
    assert keys(pushes[-1]) == [(PEER, "a"), (PEER, "b"), (SELF, "local"), (THIRD, "x")]
    errors.replace_node(PEER, [entry("c", PEER), entry("forged", THIRD), entry("f", SELF)])
    assert keys(errors.snapshot()) == [(PEER, "c"), (SELF, "local"), (THIRD, "x")]
    assert pushes[-1] == errors.snapshot()
    errors.replace_node(PEER, [])
    assert keys(errors.snapshot()) == [(SELF, "local"), (THIRD, "x")]


def test_the_registry_pushes_only_on_a_real_change() -> None:
    errors, pushes = registry()
    errors.replace_node(PEER, [])
    assert pushes == []
    errors.replace_node(PEER, [entry("a", PEER)])
    assert len(pushes) == 1
    errors.replace_node(PEER, [entry("a", PEER)])
    errors.replace_node(PEER, [entry("a", PEER), entry("z", THIRD)])  # the third's is ignored
    assert len(pushes) == 1
    errors.replace_node(PEER, [entry("a", PEER, "worse")])
    assert len(pushes) == 2
    assert pushes[-1] == [entry("a", PEER, "worse")]


def test_the_registry_refuses_this_nodes_own_id() -> None:
    errors, pushes = registry()
    errors.report(ErrorReport(id="local", message="this node's"))
    with pytest.raises(ValueError, match="own"):
        errors.replace_node(SELF, [])
    with pytest.raises(ValueError, match="own"):
        errors.replace_node(SELF, [entry("other", SELF)])
    assert keys(errors.snapshot()) == [(SELF, "local")]
    assert len(pushes) == 1
