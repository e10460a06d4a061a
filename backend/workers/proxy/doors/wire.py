"""What the front door reads from a request (only ``model``) and the errors it answers with.

Each client API has its own error shape, and clients parse it: the ``ollama`` package reads
``{"error": "..."}``, the ``openai`` package reads ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

MAX_BODY_BYTES = 32 * 1024 * 1024
Dialect = Literal["ollama", "openai", "anthropic"]


class ModelField(msgspec.Struct):
    """A request body seen by the router: every field but ``model`` is skipped, not parsed."""

    model: str | None = None


class BadRequest(Exception):
    """The body is not JSON, not an object, or names no model."""


_decoder = msgspec.json.Decoder(ModelField)


def read_model(body: bytes) -> str:
    """The ``model`` named in a JSON request body; raises ``BadRequest`` otherwise."""
    if not body.strip():
        raise BadRequest("missing request body")
    try:
        decoded = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid request: {exc}") from None
    except msgspec.DecodeError:
        raise BadRequest("invalid request: the body is not valid JSON") from None
    except RecursionError:  # even skipped fields are decoded recursively
        raise BadRequest("invalid request: the body is nested too deeply") from None
    if not decoded.model or not decoded.model.strip():
        raise BadRequest("model is required")
    return decoded.model


def dialect_for(path: str) -> Dialect:
    """The API a request path belongs to: ``/api/*`` is Ollama's, ``/v1/messages`` Anthropic's."""
    if path.startswith("/api/"):
        return "ollama"
    if path.startswith("/v1/messages"):
        return "anthropic"
    return "openai"


def error_body(dialect: Dialect, message: str, *, kind: str, code: str | None) -> dict[str, Any]:
    """An error in the client API's own shape."""
    if dialect == "ollama":
        return {"error": message}
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def unknown_model_body(dialect: Dialect, model: str) -> dict[str, Any]:
    """The 404 answer for a model no engine behind this door has."""
    if dialect == "ollama":
        return error_body(dialect, f"model '{model}' not found", kind="", code=None)
    if dialect == "anthropic":
        return error_body(dialect, f"model: {model}", kind="not_found_error", code=None)
    return error_body(
        dialect,
        f"The model `{model}` does not exist or is not available on this computer.",
        kind="not_found_error",
        code="model_not_found",
    )
