"""A client naming where its model runs: ``model@node`` and ``<engine>/model``."""

from __future__ import annotations

from backend.protocol.proxy import ProxyTargets, RouteTarget, TargetKind
from backend.workers.proxy.routing.candidates import owners
from backend.workers.proxy.routing.pins import pinned


def _target(node: str, name: str, models: list[str], kind: TargetKind = "peer") -> RouteTarget:
    return RouteTarget(
        node_id=node,
        kind=kind,
        base_url=f"https://{node}:1",
        name=name,
        models=models,
    )


TABLE = ProxyTargets(
    node_id="me",
    engines={
        "llamacpp": [
            _target("me", "laptop", ["tiny"], "local"),
            _target("gpu", "GPU-Box", ["tiny"]),
        ],
        "ollama": [_target("gpu", "GPU-Box", ["tiny:latest", "qwen"])],
        "lmstudio": [_target("mac", "studio", ["qwen2.5@q4_k_m"])],
    },
)


def _where(name: str) -> list[tuple[str, str]] | None:
    pin = pinned(TABLE, name, "openai")
    return None if pin is None else [(t.node_id, t.engine) for t in pin.only]


def test_model_at_node_keeps_the_request_to_that_node_by_id_or_name() -> None:
    assert _where("tiny@gpu") == [("gpu", "llamacpp"), ("gpu", "ollama")]
    assert _where("tiny@gpu-box") == _where("tiny@GPU-Box") == _where("tiny@gpu")
    assert _where("tiny@laptop") == [("me", "llamacpp")]
    pin = pinned(TABLE, "tiny@gpu", "openai")
    assert pin is not None and pin.model == "tiny", "the engine gets the bare name"


def test_an_engine_prefix_keeps_the_request_to_that_engine() -> None:
    assert _where("ollama/tiny") == [("gpu", "ollama")]
    assert _where("llamacpp/tiny") == [("me", "llamacpp"), ("gpu", "llamacpp")]
    assert _where("llamacpp/tiny@gpu") == [("gpu", "llamacpp")]
    assert _where("LLAMACPP/tiny@gpu") == [("gpu", "llamacpp")]


def test_a_pin_that_matches_nothing_is_no_pin_and_names_as_listed_are_never_pins() -> None:
    assert _where("tiny@nowhere") is None
    assert _where("lmstudio/tiny") is None, "LM Studio has no tiny"
    assert _where("mistral@gpu") is None
    assert _where("tiny") is None
    # LM Studio's own names carry "@": a name listed as it is is that model, not a pin.
    assert [t.node_id for t in owners(TABLE, "qwen2.5@q4_k_m")] == ["mac"]
