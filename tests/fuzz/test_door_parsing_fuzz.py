"""What the front doors read from a request body, as pure functions: ``read_model`` (a name or
``BadRequest``), ``session_of`` (a bounded key or None), ``pin_slot`` (the body, pinned when it
is an object), the dialect and error shapes, and the model-name rules, for Ollama and OpenAI
bodies (chat, generate, embed; chat and text completions, embeddings) and junk."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from hypothesis import given

from backend.workers.proxy.doors.wire import (
    BadRequest,
    dialect_for,
    error_body,
    read_model,
    unknown_model_body,
)
from backend.workers.proxy.routing import naming
from backend.workers.proxy.scheduler.sessions import (
    MAX_SESSION_CHARS,
    SESSION_HEADER,
    pin_slot,
    session_of,
)
from tests.fuzz import strategies as fuzz
from tests.fuzz.budget import EXAMPLES, fuzz_settings, measured, timeout_for

PATHS = [
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/show",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/messages",
]
MODELS = ["llama3", "llama3:latest", "Qwen", "hf.co/org/m:Q4", " m ", "", "a/", ":", "İ"]


def _messages(rng: random.Random) -> Any:
    roles = ["system", "user", "assistant", "tool", fuzz.text(rng, 4)]
    return [
        {"role": rng.choice(roles), "content": rng.choice([fuzz.text(rng), fuzz.value(rng, 2)])}
        for _ in range(rng.randint(0, 4))
    ]


def body_document(rng: random.Random) -> dict[str, Any]:
    """A request body in one of the shapes the doors serve, members possibly of wrong types."""
    body: dict[str, Any] = {}
    if rng.random() < 0.9:
        body["model"] = rng.choice(MODELS) if rng.random() < 0.6 else fuzz.scalar(rng)
    shape = rng.choice(["chat", "generate", "embed", "openai-embed"])
    if shape == "chat":
        body["messages"] = _messages(rng) if rng.random() < 0.8 else fuzz.value(rng, 2)
    elif shape == "generate":
        body["prompt"] = fuzz.text(rng) if rng.random() < 0.8 else fuzz.value(rng, 2)
        if rng.random() < 0.3:
            body["system"] = fuzz.scalar(rng)
    elif shape == "embed":
        body["input"] = rng.choice([fuzz.text(rng), [fuzz.text(rng)], fuzz.value(rng, 2)])
    else:
        body["input"] = rng.choice([fuzz.text(rng), [1, 2, 3], fuzz.value(rng, 2)])
    for key in ("stream", "user", "options", "keep_alive", "id_slot", "max_tokens"):
        if rng.random() < 0.2:
            body[key] = fuzz.value(rng, 2)
    if rng.random() < 0.3:
        body = fuzz.replace_somewhere(rng, body, fuzz.value(rng, 2))
    return body


def make_body(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.6:
        return fuzz.encode(rng, body_document(rng))
    if roll < 0.8:
        return fuzz.mutate(rng, fuzz.encode(rng, body_document(rng)))
    if roll < 0.9:
        return fuzz.deep(rng)
    if roll < 0.95:
        return fuzz.encode(rng, fuzz.value(rng, 3))
    return rng.randbytes(rng.randint(0, 40))


def _headers(rng: random.Random) -> dict[str, str]:
    if rng.random() < 0.7:
        return {}
    return {SESSION_HEADER: fuzz.text(rng, 300)}


def check_body(body: bytes, headers: dict[str, str], slot: int) -> None:
    try:
        model: str | None = read_model(body)
    except BadRequest as exc:
        model, refusal = None, str(exc)
        assert refusal.startswith(("invalid request", "missing", "model is"))
    if model is not None:
        assert isinstance(model, str) and model.strip()
        for engine in ("ollama", "lmstudio"):
            canonical = naming.normalize(engine, model)
            assert naming.normalize(engine, canonical) == canonical
            assert naming.has_model(engine, [model], model)
    session = session_of(headers, body)
    if session is not None:
        assert session[:2] in ("k:", "u:", "c:") and len(session) <= MAX_SESSION_CHARS + 2
    pinned = pin_slot(body, "id_slot", slot)
    if pinned is not body:
        document = msgspec.json.decode(pinned)
        assert isinstance(document, dict) and document["id_slot"] == slot


@timeout_for(EXAMPLES, 0.05)
def test_request_bodies_parse_or_are_bad_requests() -> None:
    with measured("door-parsing", peak_limit=32 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            body = make_body(rng)
            headers = _headers(rng)
            slot = rng.randint(0, 64)
            with bounds.example():
                check_body(body, headers, slot)

        run()


def _name(rng: random.Random) -> str:
    # A name comes from a decoded JSON body, which never holds a lone surrogate.
    return fuzz.text(rng).encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@timeout_for(EXAMPLES, 0.05)
def test_paths_names_and_error_shapes_are_total() -> None:
    with measured("door-names", peak_limit=16 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            path = rng.choice(PATHS) + fuzz.text(rng, 6) if rng.random() < 0.5 else fuzz.text(rng)
            names = [rng.choice(MODELS) if rng.random() < 0.5 else _name(rng) for _ in range(4)]
            engine = rng.choice(["ollama", "lmstudio", "llamacpp", fuzz.text(rng, 4)])
            with bounds.example():
                dialect = dialect_for(path)
                assert dialect in ("ollama", "openai", "anthropic")
                for model in names:
                    msgspec.json.encode(unknown_model_body(dialect, model))
                    msgspec.json.encode(error_body(dialect, model, kind="k", code=None))
                federated = naming.federate(engine, [names[:2], names[2:]])
                assert federated == sorted(federated)
                assert naming.same_model(engine, names[0], names[0])

        run()


# Regressions found by the fuzz tests ---------------------------------------------------------


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deeply_nested_body_is_a_bad_request(depth: int) -> None:
    # msgspec raised RecursionError (even for a skipped member), which the door answered 500.
    nested = b'{"model":"m","x":' + b"[" * depth
    for body in (nested, nested + b"]" * depth + b"}"):
        with pytest.raises(BadRequest, match="nested too deeply"):
            read_model(body)
        assert session_of({}, body) is None
        assert pin_slot(body, "id_slot", 1) is body
