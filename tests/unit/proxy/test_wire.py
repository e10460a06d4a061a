"""Reading only the model from a body, and each client API's error shape."""

from __future__ import annotations

import pytest

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.doors.wire import BadRequest, read_model, unknown_model_body
from backend.workers.proxy.routing.candidates import local_target, owners, upstream_url


def test_model_is_read_and_other_fields_are_skipped() -> None:
    body = b'{"messages": [{"role": "user", "content": "x"}], "model": "llama3", "stream": true}'
    assert read_model(body) == "llama3"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "missing request body"),
        (b"[1, 2]", "invalid request"),
        (b'{"model": 3}', "invalid request"),
        (b'{"prompt": "hi"}', "model is required"),
        (b'{"model": "  "}', "model is required"),
    ],
)
def test_malformed_bodies_are_bad_requests(body: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        read_model(body)


def test_unknown_model_errors_follow_each_client_api() -> None:
    assert unknown_model_body("ollama", "x") == {"error": "model 'x' not found"}
    error = unknown_model_body("openai", "x")["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("not_found_error", "model_not_found")


def _target(node: str, kind: str, url: str, models: list[str]) -> RouteTarget:
    return RouteTarget(node_id=node, kind=kind, base_url=url, models=models)  # type: ignore[arg-type]


def test_doors_serve_their_engines_models_by_the_engines_naming_rule() -> None:
    targets = ProxyTargets(
        engines={
            "ollama": [
                _target("b", "peer", "http://127.0.0.1:3", ["llama3"]),
                _target("a", "local", "http://127.0.0.1:1", ["llama3:latest"]),
                _target("c", "engine", "http://127.0.0.1:4", ["qwen"]),
            ],
            "lmstudio": [_target("a", "local", "http://127.0.0.1:2", ["Qwen"])],
        }
    )
    assert [t.node_id for t in owners(targets, "ollama", "LLAMA3")] == ["a", "b"]
    assert owners(targets, "openai", "qwen") == []  # LM Studio names compare exactly
    assert [t.node_id for t in owners(targets, "openai", "Qwen")] == ["a"]
    assert owners(targets, "llamacpp", "anything") == []
    assert local_target(targets, "llamacpp") is None
    assert local_target(targets, "ollama") is targets.engines["ollama"][1]


def test_a_peer_is_reached_through_its_relay_and_others_directly() -> None:
    peer = _target("b", "peer", "http://127.0.0.1:3/", [])
    engine = _target("c", "engine", "http://127.0.0.1:4", [])
    assert (
        upstream_url(peer, "/api/chat?x=1", "ollama")
        == "http://127.0.0.1:3/_pair/relay/ollama/api/chat?x=1"
    )
    assert (
        upstream_url(peer, "/v1/models", "openai")
        == "http://127.0.0.1:3/_pair/relay/openai/v1/models"
    )
    assert upstream_url(engine, "/api/chat", "ollama") == "http://127.0.0.1:4/api/chat"
