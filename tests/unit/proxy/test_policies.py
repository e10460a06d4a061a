"""Front-door policies: model naming, eligibility and order, reservations, retried statuses."""

from __future__ import annotations

import pytest

from backend.workers.proxy.routing import naming
from backend.workers.proxy.routing.candidates import (
    NodeLoad,
    Reservations,
    eligible,
    least_loaded,
    order,
    released,
    reserved,
    score,
    with_snapshot,
)
from backend.workers.proxy.upstream.attempt import retryable_status


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("llama3", "llama3:latest", True),
        ("Llama3:Latest", "llama3", True),
        ("library/llama3", "library/llama3:latest", True),
        ("host:11434/ns/llama3", "host:11434/ns/llama3:latest", True),
        ("llama3:8b", "llama3:latest", False),
        ("llama3", "llama3.1", False),
    ],
)
def test_ollama_names_default_to_the_latest_tag(left: str, right: str, same: bool) -> None:
    assert naming.same_model("ollama", left, right) is same


def test_other_engines_compare_names_exactly() -> None:
    assert not naming.same_model("lmstudio", "qwen/qwen3-4b", "Qwen/Qwen3-4B")
    assert naming.same_model("llamacpp", " m.gguf ", "m.gguf")


def test_federated_lists_keep_each_model_once() -> None:
    merged = naming.federate("ollama", [["llama3", "phi3:mini"], ["llama3:latest", "qwen2"]])
    assert merged == ["llama3", "phi3:mini", "qwen2"]


def test_only_nodes_advertising_the_model_are_eligible() -> None:
    inventories = {
        "b": {"ollama": ["llama3:latest"]},
        "a": {"ollama": ["llama3"], "lmstudio": ["x"]},
        "c": {"ollama": []},
        "d": {"lmstudio": ["llama3"]},
    }
    assert eligible(inventories, "ollama", "llama3") == ["a", "b"]
    assert eligible(inventories, "ollama", "mistral") == []


def test_order_is_pin_then_priority_then_stable() -> None:
    assert order(["c", "a", "b"]) == ["a", "b", "c"]
    assert order(["c", "a", "b"], priority=["c", "x"]) == ["c", "a", "b"]
    assert order(["c", "a", "b"], pin="b", priority=["c"]) == ["b", "c", "a"]
    assert order(["a", "b"], pin="z") == ["a", "b"], "a pin that is not eligible is ignored"


def test_reservations_spread_a_burst_over_equally_idle_nodes() -> None:
    reservations = with_snapshot(Reservations(), 1, {"a": NodeLoad(), "b": NodeLoad()})
    picks = []
    for _ in range(4):
        picks.append(least_loaded(reservations, ["a", "b"]))
        reservations = reserved(reservations, picks[-1])
    assert picks == ["a", "b", "a", "b"]


def test_a_busy_node_is_passed_over_and_a_pin_is_honoured() -> None:
    loads = {"a": NodeLoad(pending=3), "b": NodeLoad(gpu_pressure=1)}
    reservations = with_snapshot(Reservations(), 1, loads)
    assert least_loaded(reservations, ["a", "b"]) == "b"
    assert least_loaded(reserved(reservations, "b"), ["a", "b"], pinned=True) == "a"


def test_late_releases_never_make_a_node_look_idler_than_it_is() -> None:
    reservations = with_snapshot(Reservations(), 1, {"a": NodeLoad(), "b": NodeLoad()})
    node, generation = least_loaded(reservations, ["a", "b"]), reservations.generation
    reservations = reserved(reservations, node)
    newer = with_snapshot(reservations, 2, {"a": NodeLoad(pending=1), "b": NodeLoad()})
    assert newer is not reservations
    reservations = released(newer, node, generation)  # counted in snapshot 2 already: dropped
    assert score(reservations, "a") == 1
    assert with_snapshot(reservations, 2, {"a": NodeLoad()}) is reservations, (
        "same generation is ignored"
    )
    node, generation = least_loaded(reservations, ["a", "b"]), reservations.generation
    reservations = reserved(reservations, node)
    assert node == "b"
    reservations = released(reservations, node, generation)
    reservations = released(reservations, node, generation)
    assert score(reservations, "b") == 0, "a double release cannot go below zero"


@pytest.mark.parametrize(
    ("status", "inference", "expected"),
    [
        (500, False, True),
        (503, True, True),
        # An engine's deterministic "not supported" (llama-server without embeddings) would
        # only come back again: it goes to the client at once.
        (501, True, False),
        (505, True, False),
        (429, False, True),
        (408, True, True),
        (404, True, True),
        (404, False, False),
        (400, True, False),
        (401, True, False),
        (200, True, False),
        (302, True, False),
    ],
)
def test_retryable_statuses(status: int, inference: bool, expected: bool) -> None:
    assert retryable_status(status, inference=inference) is expected
