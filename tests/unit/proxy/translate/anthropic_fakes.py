"""Engine answers in the OpenAI wire format, and readers for the Anthropic side, for tests."""

from __future__ import annotations

from typing import Any

import msgspec

from backend.workers.proxy.translate import anthropic_api
from backend.workers.proxy.translate.base import ReplyTranslator, Translation

ENGINE_ID = "chatcmpl-abc123"


def now_ns() -> int:
    """A fixed clock: generated ids are predictable."""
    return 0xABC


def anthropic_request(**fields: Any) -> dict[str, Any]:
    """A minimal valid Anthropic request, with ``fields`` added or replaced."""
    request: dict[str, Any] = {
        "model": "qwen3:0.6b",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    request.update(fields)
    return request


def translated(**fields: Any) -> Translation:
    """The translation of ``anthropic_request(**fields)``."""
    body = msgspec.json.encode(anthropic_request(**fields))
    return anthropic_api.translate("/v1/messages", body, now_ns=now_ns)


def engine_body(**fields: Any) -> dict[str, Any]:
    """The OpenAI body the engine gets for ``anthropic_request(**fields)``."""
    body: dict[str, Any] = msgspec.json.decode(translated(**fields).request.body)
    return body


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One OpenAI stream record (``data: ...\\n\\n``) for choice 0."""
    record: dict[str, Any] = {
        "id": ENGINE_ID,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen3:0.6b",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish, **extra}],
    }
    return b"data: " + msgspec.json.encode(record) + b"\n\n"


def usage_chunk(prompt: int, completion: int) -> bytes:
    """The record ``stream_options.include_usage`` adds: no choices, the token counts."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    record = {"id": ENGINE_ID, "choices": [], "usage": usage}
    return b"data: " + msgspec.json.encode(record) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def tool_call_chunks(index: int, call_id: str, name: str, pieces: list[str]) -> bytes:
    """A tool call streamed as OpenAI engines do: id and name first, then argument pieces."""
    first = {"index": index, "id": call_id, "type": "function"}
    out = chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]})
    for piece in pieces:
        out += chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return out


def completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> bytes:
    """A non-streamed OpenAI chat completion body."""
    body = {
        "id": ENGINE_ID,
        "object": "chat.completion",
        "created": 1,
        "model": "qwen3:0.6b",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **extra}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    return msgspec.json.encode(body)


def feed(reply: ReplyTranslator, data: bytes, step: int) -> list[bytes]:
    """The translator's output pieces for ``data`` fed ``step`` bytes at a time."""
    return [reply.chunk(data[start : start + step]) for start in range(0, len(data), step)]


def events(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event name, data)`` pairs of an Anthropic event stream, checking the framing."""
    assert stream.endswith(b"\n\n") or not stream
    out: list[tuple[str, dict[str, Any]]] = []
    for record in stream.split(b"\n\n")[:-1]:
        name_line, data_line = record.split(b"\n")
        assert name_line.startswith(b"event: ") and data_line.startswith(b"data: ")
        data: dict[str, Any] = msgspec.json.decode(data_line[6:])
        assert data["type"] == name_line[7:].decode()
        out.append((data["type"], data))
    return out


def stream_events(data: bytes, step: int = 1, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """The Anthropic events for engine stream ``data`` answering a streamed request."""
    reply = translated(stream=True, **fields).reply
    return events(b"".join(feed(reply, data, step)))
