"""Reading only the model from a body, and each client API's error shape."""

from __future__ import annotations

import pytest

from backend.components.proxy.targets import EngineTarget, ProxyTargets, engine_for, serves
from backend.components.proxy.wire import BadRequest, read_model, unknown_model_body


def test_model_is_read_and_other_fields_are_skipped() -> None:
    body = b'{"messages": [{"role": "user", "content": "x"}], "model": "llama3", "stream": true}'
    assert read_model(body) == "llama3"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1, 2]", "invalid request"),
        (b'{"model": 3}', "invalid request"),
        (b'{"prompt": "hi"}', "model field is required"),
        (b'{"model": "  "}', "model field is required"),
    ],
)
def test_malformed_bodies_are_bad_requests(body: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        read_model(body)


def test_unknown_model_errors_follow_each_client_api() -> None:
    assert unknown_model_body("ollama", "x") == {
        "error": 'model "x" not found, try pulling it first'
    }
    error = unknown_model_body("openai", "x")["error"]
    assert set(error) == {"message", "type", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", "model_not_found")


def test_doors_serve_their_engines_models_by_the_engines_naming_rule() -> None:
    targets = ProxyTargets(
        engines={
            "ollama": EngineTarget(base_url="http://127.0.0.1:1", models=["llama3:latest"]),
            "lmstudio": EngineTarget(base_url="http://127.0.0.1:2", models=["Qwen"]),
        }
    )
    assert serves(targets, "ollama", "LLAMA3") is targets.engines["ollama"]
    assert serves(targets, "openai", "qwen") is None  # LM Studio names compare exactly
    assert serves(targets, "openai", "Qwen") is targets.engines["lmstudio"]
    assert serves(targets, "llamacpp", "anything") is None
    assert engine_for(targets, "llamacpp") is None
