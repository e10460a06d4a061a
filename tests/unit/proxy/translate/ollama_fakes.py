"""Ollama requests, engine answers in the OpenAI wire format and readers of Ollama's answers."""

from __future__ import annotations

import json
from typing import Any

from backend.workers.proxy.translate.base import EngineRequest, Translation
from backend.workers.proxy.translate.ollama_api import translate

MODEL = "qwen3:0.6b"
NOW = 1_796_403_600_123_456_789  # 2026-12-04T17:00:00.123456789Z
BASE_REQUESTS: dict[str, dict[str, Any]] = {
    "/api/chat": {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
    "/api/generate": {"model": MODEL, "prompt": "Hi"},
    "/api/embed": {"model": MODEL, "input": "Hi"},
    "/api/embeddings": {"model": MODEL, "prompt": "Hi"},
}


def now_ns() -> int:
    """A fixed clock."""
    return NOW


def ollama_request(path: str, **fields: Any) -> dict[str, Any]:
    """A minimal valid request for ``path`` with ``fields`` added or replaced."""
    return {**BASE_REQUESTS[path], **fields}


def translated(path: str, **fields: Any) -> Translation:
    """The translation of the minimal request for ``path`` with ``fields``."""
    body = json.dumps(ollama_request(path, **fields)).encode()
    return translate(path, body, now_ns=now_ns)


def engine_request(path: str, **fields: Any) -> tuple[EngineRequest, dict[str, Any]]:
    """The engine request and its decoded body."""
    request = translated(path, **fields).request
    return request, json.loads(request.body)


def engine_body(path: str, **fields: Any) -> dict[str, Any]:
    """The decoded OpenAI body the engine gets."""
    return engine_request(path, **fields)[1]


def sse(*records: dict[str, Any] | str) -> bytes:
    """An SSE stream of ``records`` (a str is sent as is: ``[DONE]``)."""
    lines = (r if isinstance(r, str) else json.dumps(r) for r in records)
    return b"".join(f"data: {line}\n\n".encode() for line in lines)


def ndjson(data: bytes) -> list[dict[str, Any]]:
    """The records of an NDJSON answer (each line ends with a newline)."""
    assert data.endswith(b"\n") or not data
    return [json.loads(line) for line in data.splitlines()]


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One llama-server chat completion chunk."""
    return {
        "choices": [{"finish_reason": finish_reason, "index": 0, "delta": delta}],
        "created": 1796403600,
        "id": "chatcmpl-QwZ1",
        "model": "engine-side-name",
        "system_fingerprint": "b7100-3a2c8b1",
        "object": "chat.completion.chunk",
    }


USAGE_CHUNK: dict[str, Any] = {
    "choices": [],
    "created": 1796403600,
    "id": "chatcmpl-QwZ1",
    "model": "engine-side-name",
    "object": "chat.completion.chunk",
    "usage": {"completion_tokens": 12, "prompt_tokens": 9, "total_tokens": 21},
    "timings": {
        "cache_n": 0,
        "prompt_n": 9,
        "prompt_ms": 12.5,
        "prompt_per_second": 720.0,
        "predicted_n": 12,
        "predicted_ms": 80.25,
        "predicted_per_second": 149.5,
    },
}

# A real-looking llama-server stream: reasoning, text with multi-byte characters, a keep-alive
# comment, CRLF framing for one event, the finish, then the usage and timings, then [DONE].
LLAMA_SERVER_STREAM = (
    sse(
        chunk({"role": "assistant", "content": None}),
        chunk({"reasoning_content": "The user greets"}),
        chunk({"reasoning_content": " me."}),
    )
    + b": ping\n\n"
    + sse(chunk({"content": "Hé"}), chunk({"content": "llo 👋"}))
    + 'data: {"choices":[{"index":0,"delta":{"content":" – ça va?"}}]}\r\n\r\n'.encode()
    + sse(chunk({}, "stop"), USAGE_CHUNK, "[DONE]")
)


def merged(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer from an Ollama stream's records, shaped like the non-streamed answer: texts
    joined, tool calls and log probabilities gathered, the rest from the final record."""
    assert records[-1]["done"] is True
    assert all(record["done"] is False for record in records[:-1])
    view = dict(records[-1])
    parts = [record.get("message", record) for record in records]
    texts = ("content", "thinking") if "message" in view else ("response", "thinking")
    target = dict(view["message"]) if "message" in view else view
    for key in texts:
        text = "".join(part.get(key) or "" for part in parts)
        if text or key in ("content", "response"):
            target[key] = text
    calls = [call for part in parts for call in part.get("tool_calls", [])]
    if calls:
        target["tool_calls"] = calls
    logprobs = [item for record in records for item in record.get("logprobs", [])]
    if logprobs:
        view["logprobs"] = logprobs
    if "message" in view:
        view["message"] = target
    return view


def answer_body(spec: dict[str, Any]) -> bytes:
    """The engine's non-streamed OpenAI answer for ``spec``."""
    if "vectors" in spec:
        data = [
            {"object": "embedding", "index": i, "embedding": v}
            for i, v in enumerate(spec["vectors"])
        ]
        usage = {"prompt_tokens": spec.get("prompt_tokens", 1), "total_tokens": 1}
        return json.dumps({"object": "list", "data": data, "model": "e", "usage": usage}).encode()
    choice: dict[str, Any] = {"index": 0, "finish_reason": spec.get("finish_reason", "stop")}
    if "text" in spec:
        choice["text"] = spec["text"]
    else:
        message = {"role": "assistant", "content": spec.get("content", "Hello")}
        for key in ("reasoning_content", "reasoning"):
            if key in spec:
                message[key] = spec[key]
        if "tool_calls" in spec:
            message["tool_calls"] = [openai_call(call) for call in spec["tool_calls"]]
        choice["message"] = message
    if "logprobs" in spec:
        choice["logprobs"] = {"content": spec["logprobs"]}
    answer = {"model": spec.get("model", "engine-side-name"), "choices": [choice]}
    answer["usage"] = spec.get("usage", {"prompt_tokens": 5, "completion_tokens": 2})
    if "timings" in spec:
        answer["timings"] = spec["timings"]
    return json.dumps(answer).encode()


def openai_call(call: tuple[str, str, str], index: int = 0) -> dict[str, Any]:
    call_id, name, arguments = call
    function = {"name": name, "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def stream_body(spec: dict[str, Any]) -> bytes:
    """The same answer as ``answer_body(spec)``, streamed the way llama-server streams it,
    every text in two pieces."""
    records: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": None})]
    if "text" in spec:
        text = spec["text"]
        records += [{"choices": [{"index": 0, "text": piece}]} for piece in halves(text)]
    for key in ("reasoning_content", "reasoning"):
        records += [chunk({key: piece}) for piece in halves(spec.get(key, ""))]
    logprobs = spec.get("logprobs", [])
    content = "" if "text" in spec else spec.get("content", "Hello")
    for number, piece in enumerate(halves(content)):
        record = chunk({"content": piece})
        if logprobs and number == 0:
            record["choices"][0]["logprobs"] = {"content": logprobs}
        records.append(record)
    for call in spec.get("tool_calls", []):
        call_id, name, arguments = call
        first, second = halves(arguments)
        records.append(chunk({"tool_calls": [openai_call((call_id, name, first))]}))
        records.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": second}}]}))
    records.append(chunk({}, spec.get("finish_reason", "stop")))
    usage = spec.get("usage", {"prompt_tokens": 5, "completion_tokens": 2})
    final: dict[str, Any] = {"choices": [], "usage": usage}
    if "timings" in spec:
        final["timings"] = spec["timings"]
    return sse(*records, final, "[DONE]")


def halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]
