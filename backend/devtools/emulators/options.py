"""Request parsing shared by the emulators: bodies, sampling options, OpenAI field mapping."""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import msgspec

OptionKind = Literal["integer", "float32", "boolean", "array"]

# Ollama's api.Options (runner and predict options) and the JSON kind Go's FromMap demands.
OLLAMA_OPTION_KINDS: Final[dict[str, OptionKind]] = {
    "num_ctx": "integer",
    "num_batch": "integer",
    "num_gpu": "integer",
    "main_gpu": "integer",
    "num_thread": "integer",
    "use_mmap": "boolean",
    "num_keep": "integer",
    "seed": "integer",
    "num_predict": "integer",
    "top_k": "integer",
    "repeat_last_n": "integer",
    "top_p": "float32",
    "min_p": "float32",
    "typical_p": "float32",
    "temperature": "float32",
    "repeat_penalty": "float32",
    "presence_penalty": "float32",
    "frequency_penalty": "float32",
    "stop": "array",
}


class RequestError(ValueError):
    """A request the engine rejects; ``str()`` is the engine's message."""


class GenerationOptions(msgspec.Struct, frozen=True):
    """What shapes a reply: its length cap, seed, stop strings and the context it needs."""

    num_predict: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    num_ctx: int | None = None
    temperature: float | None = None


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; Ollama's messages for an empty or malformed body."""
    if not raw.strip():
        raise RequestError("missing request body")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestError(f"invalid character in JSON body: {exc.msg}") from None
    if not isinstance(value, dict):
        type_name = "array" if isinstance(value, list) else type(value).__name__
        raise RequestError(f"json: cannot unmarshal {type_name} into Go value of type api.Request")
    return value


def parse_ollama_options(raw: object) -> GenerationOptions:
    """``options`` as Ollama's ``Options.FromMap`` reads it (unknown keys are ignored)."""
    if raw is None:
        return GenerationOptions()
    if not isinstance(raw, dict):
        raise RequestError("json: cannot unmarshal options into Go struct field of type map")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        kind = OLLAMA_OPTION_KINDS.get(key)
        if kind is None or value is None:
            continue
        values[key] = _coerce_option(key, kind, value)
    return GenerationOptions(
        num_predict=values.get("num_predict"),
        seed=values.get("seed"),
        stop=tuple(values.get("stop", ())),
        num_ctx=values.get("num_ctx"),
        temperature=values.get("temperature"),
    )


def _coerce_option(key: str, kind: OptionKind, value: object) -> Any:
    if kind in ("integer", "float32"):
        # JSON numbers only (Go's FromMap sees float64); booleans are not numbers.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestError(f'option "{key}" must be of type {kind}')
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        if not isinstance(value, bool):
            raise RequestError(f'option "{key}" must be of type boolean')
        return value
    if not isinstance(value, list):
        raise RequestError(f'option "{key}" must be of type array')
    if not all(isinstance(item, str) for item in value):
        raise RequestError(f'option "{key}" must be of an array of strings')
    return value


def openai_stop(raw: object) -> tuple[str, ...]:
    """OpenAI's ``stop``: a string or a list of strings (non-strings dropped, as Ollama does)."""
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list):
        return tuple(item for item in raw if isinstance(item, str))
    return ()


def openai_options(body: dict[str, Any], *, default_temperature: float | None) -> GenerationOptions:
    """OpenAI request fields mapped to generation options (``max_tokens`` -> ``num_predict``)."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_completion_tokens")
    seed = body.get("seed")
    temperature = body.get("temperature", default_temperature)
    return GenerationOptions(
        num_predict=_optional_int(max_tokens, "max_tokens"),
        seed=_optional_int(seed, "seed"),
        stop=openai_stop(body.get("stop")),
        temperature=float(temperature) if isinstance(temperature, int | float) else None,
    )


def _optional_int(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"invalid type for '{name}': expected an integer")
    return int(value)


def flag(body: dict[str, Any], name: str, *, default: bool) -> bool:
    """A boolean field that may be absent or null."""
    value = body.get(name)
    return default if value is None else bool(value)


def include_usage(body: dict[str, Any]) -> bool:
    """Whether ``stream_options.include_usage`` asks for the final usage chunk."""
    stream_options = body.get("stream_options")
    return isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
