"""Reading only the model from a body, and each client API's error shape."""

from __future__ import annotations

import msgspec
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


def test_every_engine_serves_its_models_by_its_own_naming_rule_one_engine_per_node() -> None:
    targets = ProxyTargets(
        engines={
            "ollama": [
                _target("b", "peer", "http://127.0.0.1:3", ["llama3"]),
                _target("a", "local", "http://127.0.0.1:1", ["llama3:latest", "Qwen"]),
                _target("c", "engine", "http://127.0.0.1:4", ["qwen"]),
            ],
            "lmstudio": [_target("a", "local", "http://127.0.0.1:2", ["Qwen"])],
        }
    )
    assert [t.node_id for t in owners(targets, "LLAMA3")] == ["a", "b"]
    # Ollama's rule matches any case; LM Studio's compares exactly.
    assert [(t.node_id, t.engine) for t in owners(targets, "qwen")] == [
        ("a", "ollama"),
        ("c", "ollama"),
    ]
    # Node a has Qwen in two engines: one entry, the engine that speaks the client's API.
    assert [(t.node_id, t.engine) for t in owners(targets, "Qwen", "openai")] == [
        ("a", "ollama"),
        ("c", "ollama"),
    ]
    assert [(t.node_id, t.engine) for t in owners(targets, "Qwen", "ollama")] == [
        ("a", "ollama"),
        ("c", "ollama"),
    ]
    assert owners(targets, "anything") == []
    assert local_target(targets, "llamacpp") is None
    assert local_target(targets, "ollama") == msgspec.structs.replace(
        targets.engines["ollama"][1], engine="ollama"
    )


def test_a_node_with_a_model_in_two_engines_serves_it_with_the_one_speaking_the_api() -> None:
    targets = ProxyTargets(
        engines={
            "ollama": [_target("a", "local", "http://127.0.0.1:1", ["tiny"])],
            "llamacpp": [_target("a", "local", "http://127.0.0.1:2", ["tiny"])],
        }
    )
    assert [t.engine for t in owners(targets, "tiny", "ollama")] == ["ollama"]
    assert [t.engine for t in owners(targets, "tiny", "anthropic")] == ["llamacpp"]
    # Both speak OpenAI's: the engine order decides.
    assert [t.engine for t in owners(targets, "tiny", "openai")] == ["llamacpp"]


def test_a_peer_is_reached_through_its_relay_and_others_directly() -> None:
    peer = _target("b", "peer", "http://127.0.0.1:3/", [])
    engine = _target("c", "engine", "http://127.0.0.1:4", [])
    assert (
        upstream_url(msgspec.structs.replace(peer, engine="ollama"), "/api/chat?x=1")
        == "http://127.0.0.1:3/_pair/relay/ollama/api/chat?x=1"
    )
    assert (
        upstream_url(msgspec.structs.replace(peer, engine="lmstudio"), "/v1/models")
        == "http://127.0.0.1:3/_pair/relay/lmstudio/v1/models"
    )
    assert upstream_url(engine, "/api/chat") == "http://127.0.0.1:4/api/chat"
