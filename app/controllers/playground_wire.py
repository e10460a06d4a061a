"""The playground's request and the reading of a door's answer, as plain functions.

One chat request in the shape of the client API the user picked (OpenAI, Ollama or
Anthropic), its address on this computer's door over loopback (no key needed there), and a
decoder per API that turns the streamed records into text, the engine's token count and errors
in plain words.
"""

from __future__ import annotations

import json
from typing import Literal
from urllib.parse import urlsplit

import msgspec

ApiName = Literal["openai", "ollama", "anthropic"]
API_TITLES: dict[ApiName, str] = {
    "openai": "OpenAI (/v1/chat/completions)",
    "ollama": "Ollama (/api/chat)",
    "anthropic": "Anthropic (/v1/messages)",
}
CHAT_PATHS: dict[ApiName, str] = {
    "openai": "/v1/chat/completions",
    "ollama": "/api/chat",
    "anthropic": "/v1/messages",
}
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API refuses a request without this header
ANTHROPIC_DEFAULT_MAX_TOKENS = 1024  # the Messages API requires max_tokens
SERVED_BY_HEADER = "X-PAIR-Served-By"
JOB_HEADER = "X-PAIR-Job"
ERROR_TEXT_LIMIT = 400


class ChatRequest(msgspec.Struct, frozen=True):
    """One streamed chat request as the user set it up (``None``: the engine's default)."""

    api: ApiName
    door_url: str
    model: str
    user: str
    system: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()


def loopback_url(door_url: str) -> str:
    """The door's address on loopback (the door is plaintext there and asks for no key)."""
    port = urlsplit(door_url).port
    if port is None:
        raise ValueError(f"the door's address has no port: {door_url}")
    return f"http://127.0.0.1:{port}"


def chat_url(request: ChatRequest) -> str:
    """The full URL the request goes to."""
    return request.door_url.rstrip("/") + CHAT_PATHS[request.api]


def chat_headers(request: ChatRequest) -> dict[str, str]:
    """The request's headers beyond what any HTTP client sends."""
    headers = {"Content-Type": "application/json"}
    if request.api == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    return headers


def chat_messages(request: ChatRequest, *, with_system: bool = True) -> list[dict[str, str]]:
    """The conversation: the system prompt (where the API takes it as a message), the user's."""
    messages = []
    if with_system and request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": request.user})
    return messages


def chat_body(request: ChatRequest) -> dict[str, object]:
    """The JSON body in the API's own shape."""
    if request.api == "ollama":
        return _ollama_body(request)
    if request.api == "anthropic":
        return _anthropic_body(request)
    body: dict[str, object] = {"model": request.model, "messages": chat_messages(request)}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.stop:
        body["stop"] = list(request.stop)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}  # the token count in the last record
    return body


def _ollama_body(request: ChatRequest) -> dict[str, object]:
    options: dict[str, object] = {}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.max_tokens is not None:
        options["num_predict"] = request.max_tokens
    if request.stop:
        options["stop"] = list(request.stop)
    body: dict[str, object] = {"model": request.model, "messages": chat_messages(request)}
    if options:
        body["options"] = options
    body["stream"] = True
    return body


def _anthropic_body(request: ChatRequest) -> dict[str, object]:
    body: dict[str, object] = {
        "model": request.model,
        "max_tokens": request.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
    }
    if request.system:
        body["system"] = request.system
    body["messages"] = chat_messages(request, with_system=False)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    body["stream"] = True
    return body


class Piece(msgspec.Struct, frozen=True):
    """What one streamed record said: text, the engine's output token count, an error."""

    text: str = ""
    tokens: int | None = None
    error: str | None = None


class StreamDecoder:
    """Reads one streamed answer line by line (SSE ``data:`` lines or Ollama's JSON lines)."""

    def __init__(self, api: ApiName) -> None:
        self.api = api

    def feed(self, line: bytes) -> Piece | None:
        """The record on ``line``, or None for a blank, comment, event-name or end line."""
        text = line.decode("utf-8", errors="replace").strip()
        if self.api != "ollama":
            if not text.startswith("data:"):
                return None
            text = text.removeprefix("data:").strip()
        if not text or text == "[DONE]":
            return None
        try:
            record = json.loads(text)
        except ValueError:
            return Piece(error=f"the door sent a record that is not JSON: {text[:80]}")
        if not isinstance(record, dict):
            return None
        return _PIECE_READERS[self.api](record)


def _openai_piece(record: dict[str, object]) -> Piece:
    error = error_text(record)
    if error is not None:
        return Piece(error=error)
    text = ""
    choices = record.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta") or choices[0].get("message")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            text = str(delta["content"])
    usage = record.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return Piece(text=text, tokens=tokens if isinstance(tokens, int) else None)


def _ollama_piece(record: dict[str, object]) -> Piece:
    error = error_text(record)
    if error is not None:
        return Piece(error=error)
    message = record.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    tokens = record.get("eval_count") if record.get("done") else None
    return Piece(
        text=text if isinstance(text, str) else "",
        tokens=tokens if isinstance(tokens, int) else None,
    )


def _anthropic_piece(record: dict[str, object]) -> Piece:
    error = error_text(record)
    if error is not None:
        return Piece(error=error)
    delta = record.get("delta")
    text = delta.get("text") if isinstance(delta, dict) else None
    usage = record.get("usage")
    tokens = usage.get("output_tokens") if isinstance(usage, dict) else None
    if record.get("type") != "message_delta":
        tokens = None  # message_start's count is the prompt's side, not the answer's
    return Piece(
        text=text if isinstance(text, str) else "",
        tokens=tokens if isinstance(tokens, int) else None,
    )


_PIECE_READERS = {"openai": _openai_piece, "ollama": _ollama_piece, "anthropic": _anthropic_piece}


def error_text(record: dict[str, object]) -> str | None:
    """The error message a JSON record carries, in any of the three APIs' shapes."""
    error = record.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return None


def error_message(status: int, body: bytes) -> str:
    """A door's refusal in plain words: its JSON message, else its text, else the status."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    message = error_text(record) if isinstance(record, dict) else None
    if message is None:
        message = text[:ERROR_TEXT_LIMIT] if text else ""
    return f"{message} (HTTP {status})" if message else f"The door answered HTTP {status}."
