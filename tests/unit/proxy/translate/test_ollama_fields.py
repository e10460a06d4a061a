"""One row per Ollama field, checked both ways: the Ollama request field reaches the engine's
OpenAI body, and the engine's OpenAI answer field reaches the Ollama answer, streamed and
not. Dropping any field of the translation fails a row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.proxy.translate.ollama_fakes import (
    MODEL,
    answer_body,
    merged,
    ndjson,
    stream_body,
    translated,
)

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5Er"
    "kJggg=="
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "tool_name": "get_weather", "content": "12 °C"},
]
PARIS_CALL = ("call_9", "get_weather", '{"city":"Paris"}')
Checks = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Row:
    """An Ollama field: what the client sends (``sent``) and where the engine's body has it
    (``in_request``: dotted paths; ``$path`` and ``$ignored`` name the EngineRequest's), and
    what the engine answers (``answer``, see ``answer_body``) and where the Ollama answer has
    it (``in_answer``)."""

    field: str
    path: str = "/api/chat"
    sent: dict[str, Any] | None = None
    in_request: Checks = ()
    answer: dict[str, Any] | None = None
    in_answer: Checks = ()


def options(**values: Any) -> dict[str, Any]:
    return {"options": values}


def sampling_row(name: str, value: Any, openai_name: str | None = None) -> Row:
    return Row(name, sent=options(**{name: value}), in_request=((openai_name or name, value),))


TABLE: list[Row] = [
    Row(
        "model",
        sent={"model": "llama3.2"},
        in_request=(("model", "llama3.2"),),
        answer={"model": "engine-side-name"},
        in_answer=(("model", "llama3.2"),),
    ),
    Row(
        "stream",
        sent={},
        in_request=(("stream", True), ("stream_options", {"include_usage": True})),
    ),
    Row(
        "num_predict",
        sent=options(num_predict=7),
        in_request=(("max_tokens", 7),),
        answer={"finish_reason": "length"},
        in_answer=(("done_reason", "length"),),
    ),
    sampling_row("temperature", 0.2),
    sampling_row("top_p", 0.9),
    sampling_row("top_k", 20),
    sampling_row("min_p", 0.05),
    sampling_row("seed", 42),
    sampling_row("presence_penalty", 0.5),
    sampling_row("frequency_penalty", 0.25),
    sampling_row("repeat_penalty", 1.1),
    sampling_row("repeat_last_n", 64),
    sampling_row("typical_p", 0.7),
    sampling_row("mirostat", 2),
    sampling_row("mirostat_tau", 5.0),
    sampling_row("mirostat_eta", 0.1),
    Row(
        "stop",
        sent=options(stop=["\n\n", "User:"]),
        in_request=(("stop", ["\n\n", "User:"]),),
        answer={"finish_reason": "stop"},
        in_answer=(("done_reason", "stop"),),
    ),
    Row(
        "num_ctx (load-time)",
        sent=options(num_ctx=8192, num_gpu=99),
        in_request=(("$ignored", ("options.num_ctx", "options.num_gpu")),),
    ),
    Row("keep_alive", sent={"keep_alive": "5m"}, in_request=(("$ignored", ("keep_alive",)),)),
    Row(
        "format json",
        sent={"format": "json"},
        in_request=(("response_format", {"type": "json_object"}),),
        answer={"content": '{"ok": true}'},
        in_answer=(("message.content", '{"ok": true}'),),
    ),
    Row(
        "format schema",
        sent={"format": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
        in_request=(
            (
                "response_format",
                {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "response",
                        "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                    },
                },
            ),
        ),
    ),
    Row(
        "system",
        path="/api/generate",
        sent={"system": "Be brief."},
        in_request=(("messages.0", {"role": "system", "content": "Be brief."}),),
    ),
    Row(
        "prompt / response",
        path="/api/generate",
        sent={"prompt": "Why is the sky blue?"},
        in_request=(("messages.0", {"role": "user", "content": "Why is the sky blue?"}),),
        answer={"content": "Rayleigh scattering."},
        in_answer=(("response", "Rayleigh scattering."),),
    ),
    Row(
        "raw",
        path="/api/generate",
        sent={"raw": True, "prompt": "<|im_start|>user\nHi"},
        in_request=(("$path", "/v1/completions"), ("prompt", "<|im_start|>user\nHi")),
        answer={"text": "Hello"},
        in_answer=(("response", "Hello"),),
    ),
    Row(
        "images (chat)",
        sent={"messages": [{"role": "user", "content": "What is it?", "images": [PNG]}]},
        in_request=(
            ("messages.0.content.0", {"type": "text", "text": "What is it?"}),
            ("messages.0.content.1.image_url.url", f"data:image/png;base64,{PNG}"),
        ),
    ),
    Row(
        "images (generate)",
        path="/api/generate",
        sent={"images": [PNG]},
        in_request=(("messages.0.content.1.image_url.url", f"data:image/png;base64,{PNG}"),),
    ),
    Row(
        "tools / tool_calls",
        sent={"tools": [WEATHER_TOOL]},
        in_request=(("tools", [WEATHER_TOOL]),),
        answer={"tool_calls": [PARIS_CALL], "finish_reason": "tool_calls", "content": ""},
        in_answer=(
            (
                "message.tool_calls",
                [
                    {
                        "id": "call_9",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            ),
            ("done_reason", "stop"),
        ),
    ),
    Row(
        "tool_calls (history)",
        sent={"messages": TOOL_HISTORY},
        in_request=(
            (
                "messages.1.tool_calls",
                [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            ),
        ),
    ),
    Row(
        "tool results",
        sent={"messages": TOOL_HISTORY},
        in_request=(
            (
                "messages.2",
                {
                    "role": "tool",
                    "content": "12 °C",
                    "tool_call_id": "call_0",
                    "name": "get_weather",
                },
            ),
        ),
    ),
    Row(
        "think (bool) / thinking",
        sent={"think": True},
        in_request=(("chat_template_kwargs", {"enable_thinking": True}),),
        answer={"reasoning_content": "Greet back."},
        in_answer=(("message.thinking", "Greet back."),),
    ),
    Row(
        "think (level) / reasoning",
        sent={"think": "high"},
        in_request=(("reasoning_effort", "high"),),
        answer={"reasoning": "Greet back."},
        in_answer=(("message.thinking", "Greet back."),),
    ),
    Row(
        "think (generate)",
        path="/api/generate",
        sent={"think": False},
        in_request=(("chat_template_kwargs", {"enable_thinking": False}),),
        answer={"reasoning_content": "Short."},
        in_answer=(("thinking", "Short."),),
    ),
    Row(
        "thinking (history)",
        sent={
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello", "thinking": "Greet back."},
                {"role": "user", "content": "Again"},
            ]
        },
        in_request=(("messages.1.reasoning_content", "Greet back."),),
    ),
    Row(
        "counts",
        answer={"usage": {"prompt_tokens": 31, "completion_tokens": 7}},
        in_answer=(("prompt_eval_count", 31), ("eval_count", 7), ("load_duration", 0)),
    ),
    Row(
        "timings",
        answer={"timings": {"prompt_ms": 12.5, "predicted_ms": 80.25}},
        in_answer=(
            ("prompt_eval_duration", 12_500_000),
            ("eval_duration", 80_250_000),
            ("total_duration", 92_750_000),
        ),
    ),
    Row("created_at", answer={}, in_answer=(("created_at", "2026-12-04T17:00:00.123456789Z"),)),
    Row(
        "logprobs",
        sent={"logprobs": True, "top_logprobs": 2},
        in_request=(("logprobs", True), ("top_logprobs", 2)),
        answer={"logprobs": [{"token": "Hel", "logprob": -0.1, "bytes": [72, 101, 108]}]},
        in_answer=(("logprobs.0", {"token": "Hel", "logprob": -0.1, "bytes": [72, 101, 108]}),),
    ),
    Row(
        "embed input / embeddings",
        path="/api/embed",
        sent={"input": ["a", "b"], "dimensions": 3, "truncate": True},
        in_request=(
            ("$path", "/v1/embeddings"),
            ("input", ["a", "b"]),
            ("dimensions", 3),
            ("$ignored", ("truncate",)),
        ),
        answer={"vectors": [[0.5, 0.25, 0.0], [1.0, 0.0, -1.0]], "prompt_tokens": 2},
        in_answer=(
            ("embeddings", [[0.5, 0.25, 0.0], [1.0, 0.0, -1.0]]),
            ("prompt_eval_count", 2),
            ("model", MODEL),
        ),
    ),
    Row(
        "embeddings (legacy) prompt / embedding",
        path="/api/embeddings",
        sent={"prompt": "a"},
        in_request=(("$path", "/v1/embeddings"), ("input", "a")),
        answer={"vectors": [[0.5, 0.25]]},
        in_answer=(("embedding", [0.5, 0.25]),),
    ),
]


def at(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def check(view: dict[str, Any] | Any, checks: Checks) -> None:
    for dotted, expected in checks:
        assert at(view, dotted) == expected, dotted


NAMED_FIELDS = (
    *("num_predict", "temperature", "top_p", "top_k", "stop", "seed", "format json"),
    *("format schema", "system", "images", "tools", "tool_calls", "tool results", "think"),
    *("done_reason", "counts", "timings", "model", "embed", "raw", "keep_alive", "logprobs"),
)


def test_every_row_checks_something_and_covers_the_fields() -> None:
    names = " ".join(row.field for row in TABLE)
    for row in TABLE:
        assert row.in_request or row.in_answer, row.field
        assert (row.sent is None) == (not row.in_request), row.field
        assert (row.answer is None) == (not row.in_answer), row.field
    for field in NAMED_FIELDS:
        assert field in names or any(field in str(row.in_answer) for row in TABLE), field


@pytest.mark.parametrize("row", [r for r in TABLE if r.in_request], ids=lambda r: r.field)
def test_request_field_reaches_the_engine(row: Row) -> None:
    request = translated(row.path, **(row.sent or {})).request
    view = {**json.loads(request.body), "$path": request.path, "$ignored": request.ignored}
    check(view, row.in_request)


@pytest.mark.parametrize("row", [r for r in TABLE if r.in_answer], ids=lambda r: r.field)
def test_answer_field_reaches_the_client_whole(row: Row) -> None:
    reply = translated(row.path, stream=False, **(row.sent or {})).reply
    check(json.loads(reply.whole(answer_body(row.answer or {}))), row.in_answer)


@pytest.mark.parametrize(
    "row", [r for r in TABLE if r.in_answer and "embed" not in r.path], ids=lambda r: r.field
)
def test_answer_field_reaches_the_client_streamed(row: Row) -> None:
    reply = translated(row.path, **(row.sent or {})).reply
    streamed = merged(ndjson(reply.chunk(stream_body(row.answer or {}))))
    check(streamed, row.in_answer)
    whole = translated(row.path, stream=False, **(row.sent or {})).reply.whole(
        answer_body(row.answer or {})
    )
    assert streamed == json.loads(whole)
