"""Errors registry: keyed by node and id, newer replaces older, full snapshots on change."""

from __future__ import annotations

import pytest

from backend.components.errors import state
from backend.components.errors.registry import ErrorsRegistry
from backend.protocol import errors
from backend.protocol.types.broker import ErrorAction, ErrorClear, ErrorReport, ServiceError
from tests.fakes import FakeClock


def _registry() -> tuple[ErrorsRegistry, list[list[ServiceError]], FakeClock]:
    pushes: list[list[ServiceError]] = []
    clock = FakeClock()
    return ErrorsRegistry(node_id="self", clock=clock, on_update=pushes.append), pushes, clock


def test_report_fills_node_and_times_and_pushes_a_snapshot() -> None:
    registry, pushes, clock = _registry()
    registry.report(ErrorReport(id="b", message="second"))
    registry.report(
        ErrorReport(
            id="a",
            message="first",
            severity="warning",
            action=ErrorAction(kind="retry", label="Retry"),
        )
    )
    assert [entry.id for entry in pushes[-1]] == ["a", "b"]
    first = pushes[-1][0]
    assert (first.node_id, first.created_at, first.severity) == ("self", clock.now, "warning")
    assert first.action is not None and first.action.kind == "retry"


def test_newer_report_replaces_and_keeps_creation_time_older_is_dropped() -> None:
    registry, pushes, _ = _registry()
    registry.report(ErrorReport(id="x", message="v1", timestamp=100.0))
    registry.report(ErrorReport(id="x", message="v2", timestamp=200.0))
    registry.report(ErrorReport(id="x", message="stale", timestamp=150.0))
    (entry,) = registry.snapshot()
    assert (entry.message, entry.created_at, entry.updated_at) == ("v2", 100.0, 200.0)
    assert len(pushes) == 2, "a dropped report must not push"


def test_same_id_on_two_nodes_are_two_entries() -> None:
    registry, _, _ = _registry()
    registry.report(ErrorReport(id="x", message="here"))
    registry.report(ErrorReport(id="x", message="there", node_id="peer"))
    assert [(e.id, e.node_id) for e in registry.snapshot()] == [("x", "peer"), ("x", "self")]
    registry.clear(ErrorClear(id="x"))
    assert [(e.id, e.node_id) for e in registry.snapshot()] == [("x", "peer")]


def test_identical_report_does_not_push_again() -> None:
    registry, pushes, _ = _registry()
    registry.raise_error("x", "same")
    registry.raise_error("x", "same")
    assert len(pushes) == 1


def test_clear_is_dismissal_and_a_later_report_resurrects() -> None:
    registry, pushes, _ = _registry()
    registry.raise_error("x", "broken")
    registry.clear_error("x")
    assert registry.snapshot() == []
    registry.clear_error("x")
    assert len(pushes) == 2, "clearing nothing must not push"
    registry.raise_error("x", "broken")
    assert len(registry.snapshot()) == 1


@pytest.mark.parametrize(("error_id", "message"), [("", "m"), ("  ", "m"), ("id", "")])
def test_empty_id_or_message_is_invalid_params(error_id: str, message: str) -> None:
    registry, pushes, _ = _registry()
    with pytest.raises(errors.InvalidParams):
        registry.report(ErrorReport(id=error_id, message=message))
    assert pushes == []


def test_apply_functions_do_not_mutate_their_input() -> None:
    before: dict[state.ErrorKey, ServiceError] = {}
    after = state.apply_report(before, ErrorReport(id="x", message="m"), local_node="n", now=1.0)
    assert before == {}
    assert after is not None and ("n", "x") in after
