"""One row per field, both ways: an Anthropic request field and the OpenAI value the engine
gets; an OpenAI answer field and the Anthropic answer field the client gets, whole and streamed
(the stream read back with the ``anthropic`` package's own event accumulation). A field the
translation drops fails its row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types.message_create_params import MessageCreateParamsBase

from backend.workers.proxy.translate.base import Unhonoured
from tests.unit.proxy.translate.anthropic_fakes import (
    DONE,
    ENGINE_ID,
    chunk,
    events,
    feed,
    tool_call_chunks,
    translated,
    usage_chunk,
)

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
TOOL = {"name": "f", "description": "Does f.", "input_schema": {"type": "object"}}
CALL = {"type": "tool_use", "id": "toolu_7", "name": "f", "input": {"x": 1}}


@dataclass(frozen=True)
class Sent:
    """What the engine gets: the OpenAI body, and the fields reported as ignored."""

    body: dict[str, Any]
    ignored: tuple[str, ...]


def sent(**fields: Any) -> Sent:
    translation = translated(**fields)
    return Sent(msgspec.json.decode(translation.request.body), translation.request.ignored)


def user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


def turns(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    """A question, an assistant turn with ``blocks``, and a follow-up."""
    return [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": list(blocks)},
        {"role": "user", "content": "Next"},
    ]


def body_at(*keys: str | int) -> Callable[[Sent], Any]:
    """Reads the value at ``keys`` in the engine's body."""
    return lambda sent: at(*keys)(sent.body)


def at(*keys: str | int) -> Callable[[Any], Any]:
    """Reads the value at ``keys`` in nested lists and objects."""

    def read(value: Any) -> Any:
        for key in keys:
            value = value[key]
        return value

    return read


def ignored_fields(sent: Sent) -> tuple[str, ...]:
    """Reads the fields reported as ignored."""
    return sent.ignored


# (field, Anthropic request fields, what to read in what the engine gets, the value expected)
REQUEST_TABLE = [
    pytest.param({"model": "llama3.2:1b"}, body_at("model"), "llama3.2:1b", id="model"),
    pytest.param({"max_tokens": 77}, body_at("max_tokens"), 77, id="max_tokens"),
    pytest.param(
        {"system": "Sys"},
        body_at("messages", 0),
        {"role": "system", "content": "Sys"},
        id="system (string)",
    ),
    pytest.param(
        {"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
        body_at("messages", 0, "content"),
        "A\nB",
        id="system (blocks)",
    ),
    pytest.param(
        {}, body_at("messages"), [{"role": "user", "content": "Hi"}], id="messages (string)"
    ),
    pytest.param(
        {"messages": user({"type": "text", "text": "T"})},
        body_at("messages"),
        [{"role": "user", "content": "T"}],
        id="messages (text blocks)",
    ),
    pytest.param({"temperature": 0.3}, body_at("temperature"), 0.3, id="temperature"),
    pytest.param({"top_p": 0.8}, body_at("top_p"), 0.8, id="top_p"),
    pytest.param({"top_k": 20}, body_at("top_k"), 20, id="top_k"),
    pytest.param(
        {"stop_sequences": ["##", "END"]}, body_at("stop"), ["##", "END"], id="stop_sequences"
    ),
    pytest.param({"stream": True}, body_at("stream"), True, id="stream"),
    pytest.param(
        {"stream": True}, body_at("stream_options"), {"include_usage": True}, id="stream_options"
    ),
    pytest.param({"metadata": {"user_id": "u-1"}}, body_at("user"), "u-1", id="metadata.user_id"),
    pytest.param(
        {"messages": user({"type": "image", "source": PNG})},
        body_at("messages", 0, "content", 0, "image_url", "url"),
        "data:image/png;base64,iVBORw0KGgo=",
        id="image (base64)",
    ),
    pytest.param(
        {"messages": user({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}})},
        body_at("messages", 0, "content", 0),
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        id="image (url)",
    ),
    pytest.param(
        {"tools": [TOOL]},
        body_at("tools"),
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object"},
                    "description": "Does f.",
                },
            }
        ],
        id="tools",
    ),
    pytest.param(
        {"tools": [{**TOOL, "strict": True}]},
        body_at("tools", 0, "function", "strict"),
        True,
        id="tools[].strict",
    ),
    pytest.param(
        {"tool_choice": {"type": "auto"}}, body_at("tool_choice"), "auto", id="tool_choice auto"
    ),
    pytest.param(
        {"tool_choice": {"type": "any"}}, body_at("tool_choice"), "required", id="tool_choice any"
    ),
    pytest.param(
        {"tool_choice": {"type": "none"}}, body_at("tool_choice"), "none", id="tool_choice none"
    ),
    pytest.param(
        {"tool_choice": {"type": "tool", "name": "f"}},
        body_at("tool_choice"),
        {"type": "function", "function": {"name": "f"}},
        id="tool_choice tool",
    ),
    pytest.param(
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
        body_at("parallel_tool_calls"),
        False,
        id="tool_choice.disable_parallel_tool_use",
    ),
    pytest.param(
        {"messages": turns(CALL)},
        body_at("messages", 1, "tool_calls"),
        [{"id": "toolu_7", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}],
        id="tool_use (history)",
    ),
    pytest.param(
        {"messages": turns({"type": "text", "text": "Calling."}, CALL)},
        body_at("messages", 1, "content"),
        "Calling.",
        id="text beside tool_use",
    ),
    pytest.param(
        {
            "messages": turns(
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "A"},
            )
        },
        body_at("messages", 1),
        {"role": "assistant", "content": "A"},
        id="thinking (history, dropped)",
    ),
    pytest.param(
        {"messages": user({"type": "tool_result", "tool_use_id": "toolu_7", "content": "42"})},
        body_at("messages", 0),
        {"role": "tool", "tool_call_id": "toolu_7", "content": "42"},
        id="tool_result",
    ),
    pytest.param(
        {
            "messages": user(
                {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}
            )
        },
        body_at("messages", 0, "content"),
        "Error: boom",
        id="tool_result.is_error",
    ),
    pytest.param(
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        body_at("chat_template_kwargs"),
        {"enable_thinking": True},
        id="thinking enabled",
    ),
    pytest.param(
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        ignored_fields,
        ("thinking.budget_tokens",),
        id="thinking.budget_tokens (ignored)",
    ),
    pytest.param(
        {"thinking": {"type": "disabled"}},
        body_at("chat_template_kwargs"),
        {"enable_thinking": False},
        id="thinking disabled",
    ),
    pytest.param(
        {"service_tier": "auto"}, ignored_fields, ("service_tier",), id="service_tier (ignored)"
    ),
    pytest.param(
        {"cache_control": {"type": "ephemeral"}},
        ignored_fields,
        ("cache_control",),
        id="cache_control (ignored)",
    ),
    pytest.param(
        {"system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]},
        ignored_fields,
        ("cache_control",),
        id="block cache_control (ignored)",
    ),
]


@pytest.mark.parametrize(
    ("fields", "read", "expected"),
    REQUEST_TABLE,
)
def test_request_field(fields: dict[str, Any], read: Callable[[Sent], Any], expected: Any) -> None:
    assert read(sent(**fields)) == expected


def test_every_anthropic_request_field_is_mapped_ignored_or_refused() -> None:
    mapped = {
        "model",
        "max_tokens",
        "messages",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
    }
    named = {str(row.id).split(" ")[0].split(".")[0] for row in REQUEST_TABLE}
    assert mapped <= named
    for name in sorted(set(MessageCreateParamsBase.__annotations__) - mapped):
        assert name in refused_or_ignored(name)


def refused_or_ignored(name: str) -> tuple[str, ...]:
    """The field named by a refusal of ``name``, or the fields reported as ignored."""
    try:
        return sent(**{name: {"x": 1}}).ignored
    except Unhonoured as refused:
        return (refused.field,)


@dataclass(frozen=True)
class EngineAnswer:
    """One OpenAI answer, rendered both as a whole completion and as a stream."""

    content: str | None = "Hello there"
    reasoning: tuple[str, str] | None = None  # (field name, text)
    calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, arguments)
    finish: str = "stop"
    extra: dict[str, Any] = field(default_factory=dict)  # more choice fields
    usage: tuple[int, int] = (13, 5)

    def whole(self) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message[self.reasoning[0]] = self.reasoning[1]
        if self.calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in self.calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": self.finish, **self.extra}
        usage = {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1]}
        body = {"id": ENGINE_ID, "model": "engine-name", "choices": [choice], "usage": usage}
        return msgspec.json.encode(body)

    def stream(self) -> bytes:
        out = chunk({"role": "assistant", "content": None})
        if self.reasoning:
            out += chunk({self.reasoning[0]: self.reasoning[1]})
        if self.content:
            half = len(self.content) // 2
            out += chunk({"content": self.content[:half]}) + chunk({"content": self.content[half:]})
        for index, (call_id, name, arguments) in enumerate(self.calls):
            half = len(arguments) // 2
            out += tool_call_chunks(index, call_id, name, [arguments[:half], arguments[half:]])
        return out + chunk({}, self.finish, **self.extra) + usage_chunk(*self.usage) + DONE


def answered_whole(answer: EngineAnswer) -> dict[str, Any]:
    reply: dict[str, Any] = msgspec.json.decode(translated().reply.whole(answer.whole()))
    return reply


def answered_streamed(answer: EngineAnswer) -> dict[str, Any]:
    """The final Message as the ``anthropic`` package accumulates the translated events."""
    reply = translated(stream=True).reply
    snapshot = None
    buffers: dict[int, bytes] = {}
    for _, data in events(b"".join(feed(reply, answer.stream(), 3))):
        snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=buffers)  # type: ignore[arg-type]
    assert snapshot is not None
    message: dict[str, Any] = snapshot.to_dict()
    return message


WEATHER = ("call_1", "weather", '{"city": "Paris"}')

# (field, the engine's answer, what to read in the client's answer, the value expected)
REPLY_TABLE = [
    pytest.param(
        EngineAnswer(),
        at("content"),
        [{"type": "text", "text": "Hello there"}],
        id="content -> text",
    ),
    pytest.param(
        EngineAnswer(reasoning=("reasoning_content", "Hmm.")),
        at("content", 0),
        {"type": "thinking", "thinking": "Hmm.", "signature": ""},
        id="reasoning_content -> thinking",
    ),
    pytest.param(
        EngineAnswer(reasoning=("reasoning", "Hm.")),
        at("content", 0, "thinking"),
        "Hm.",
        id="reasoning -> thinking",
    ),
    pytest.param(
        EngineAnswer(content=None, calls=(WEATHER,), finish="tool_calls"),
        at("content"),
        [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}],
        id="tool_calls -> tool_use",
    ),
    pytest.param(
        EngineAnswer(content=None, calls=(WEATHER, ("call_2", "time", "{}")), finish="tool_calls"),
        lambda m: [b["id"] for b in m["content"]],
        ["call_1", "call_2"],
        id="two tool_calls",
    ),
    pytest.param(EngineAnswer(), at("stop_reason"), "end_turn", id="finish stop -> end_turn"),
    pytest.param(
        EngineAnswer(finish="length"),
        at("stop_reason"),
        "max_tokens",
        id="finish length -> max_tokens",
    ),
    pytest.param(
        EngineAnswer(calls=(WEATHER,), finish="tool_calls"),
        at("stop_reason"),
        "tool_use",
        id="finish tool_calls -> tool_use",
    ),
    pytest.param(
        EngineAnswer(finish="content_filter"),
        at("stop_reason"),
        "refusal",
        id="finish content_filter -> refusal",
    ),
    pytest.param(
        EngineAnswer(extra={"stop_reason": "##"}),
        lambda m: (m["stop_reason"], m["stop_sequence"]),
        ("stop_sequence", "##"),
        id="matched stop -> stop_sequence",
    ),
    pytest.param(
        EngineAnswer(),
        lambda m: m.get("stop_sequence"),
        None,
        id="no matched stop -> stop_sequence null",
    ),
    pytest.param(
        EngineAnswer(usage=(31, 4)),
        at("usage", "input_tokens"),
        31,
        id="usage.prompt_tokens -> input_tokens",
    ),
    pytest.param(
        EngineAnswer(usage=(31, 4)),
        at("usage", "output_tokens"),
        4,
        id="usage.completion_tokens -> output_tokens",
    ),
    pytest.param(EngineAnswer(), at("model"), "qwen3:0.6b", id="model: the client's name"),
    pytest.param(EngineAnswer(), at("id"), "msg_abc123", id="id -> msg_ id"),
    pytest.param(
        EngineAnswer(),
        lambda m: (m["role"], m["type"]),
        ("assistant", "message"),
        id="role and type",
    ),
]


@pytest.mark.parametrize("render", [answered_whole, answered_streamed], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("answer", "read", "expected"),
    REPLY_TABLE,
)
def test_reply_field(
    render: Callable[[EngineAnswer], dict[str, Any]],
    answer: EngineAnswer,
    read: Callable[[dict[str, Any]], Any],
    expected: Any,
) -> None:
    assert read(render(answer)) == expected
