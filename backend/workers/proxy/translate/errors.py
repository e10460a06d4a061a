"""An engine's error answer in the client API's own shape, with the status kept.

Engines answer errors as ``{"error": "text"}`` (Ollama, some LM Studio paths) or OpenAI's
``{"error": {"message", "type", ...}}`` (llama-server, LM Studio); anything else is taken as
text. The client reads it in its own API's shape (``doors/wire.error_body``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from backend.workers.proxy.doors.wire import Dialect, error_body

# Anthropic's error types by status; OpenAI's clients read ``type`` loosely.
_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_MESSAGE_LIMIT = 4096


def error_message(body: bytes) -> str:
    """The message an engine's error body carries (its text when it is not JSON)."""
    try:
        decoded: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body[:_MESSAGE_LIMIT].decode("utf-8", "replace").strip() or "engine error"
    error = decoded.get("error") if isinstance(decoded, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if error is None and isinstance(decoded, dict):
        error = decoded.get("message")
    return str(error)[:_MESSAGE_LIMIT] if error else "engine error"


def error_kind(status: int) -> str:
    """The error type a client API names for ``status``."""
    return _KINDS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def client_error(dialect: Dialect, status: int, body: bytes) -> bytes:
    """The engine's error ``body`` (answered with ``status``) as ``dialect``'s error body."""
    message = error_message(body)
    return msgspec.json.encode(error_body(dialect, message, kind=error_kind(status), code=None))
