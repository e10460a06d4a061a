"""Anthropic Messages requests become OpenAI chat requests; what cannot be honoured is refused."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from backend.workers.proxy.translate import anthropic_api
from backend.workers.proxy.translate.base import Malformed, Unhonoured
from tests.unit.proxy.translate.anthropic_fakes import engine_body, translated

IMAGE_DATA = "iVBORw0KGgo="
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_DATA},
}


def user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


def test_a_minimal_request_goes_to_chat_completions_unstreamed() -> None:
    translation = translated()
    assert translation.request.path == "/v1/chat/completions"
    assert translation.request.stream is False
    assert translation.request.ignored == ()
    assert msgspec.json.decode(translation.request.body) == {
        "model": "qwen3:0.6b",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert translation.reply.stream_content_type == "text/event-stream"


def test_a_streamed_request_asks_the_engine_for_usage() -> None:
    translation = translated(stream=True)
    assert translation.request.stream is True
    body = msgspec.json.decode(translation.request.body)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "stream" not in engine_body(stream=False)


def test_the_system_prompt_leads_and_its_blocks_join() -> None:
    blocks = [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]
    assert engine_body(system=blocks)["messages"][0] == {"role": "system", "content": "One.\nTwo."}
    assert engine_body(system="Be brief.")["messages"][:2] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


def test_cache_hints_and_service_tier_are_listed_as_ignored() -> None:
    cached = {"type": "text", "text": "Long.", "cache_control": {"type": "ephemeral"}}
    translation = translated(
        system=[cached], service_tier="auto", cache_control={"type": "ephemeral"}
    )
    assert translation.request.ignored == ("service_tier", "cache_control")
    assert translated(messages=user(cached)).request.ignored == ("cache_control",)


def test_text_and_images_become_content_parts() -> None:
    base64 = {"type": "base64", "media_type": "image/png", "data": IMAGE_DATA}
    url = {"type": "url", "url": "https://example.org/cat.jpg"}
    messages = user(
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": base64},
        {"type": "image", "source": url},
    )
    assert engine_body(messages=messages)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE_DATA}"}},
                {"type": "image_url", "image_url": {"url": "https://example.org/cat.jpg"}},
            ],
        }
    ]


def test_an_image_from_the_files_api_is_refused_by_its_field() -> None:
    messages = user({"type": "image", "source": {"type": "file", "file_id": "file_1"}})
    with pytest.raises(Unhonoured) as refused:
        translated(messages=messages)
    assert refused.value.field == "messages[0].content[0].source.type"


def test_tool_use_history_becomes_tool_calls_and_results_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    assert engine_body(messages=messages)["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "user", "content": "And tomorrow?"},
    ]


def test_tool_results_in_blocks_join_and_errors_say_so() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_2",
        "is_error": True,
        "content": [{"type": "text", "text": "no such"}, {"type": "text", "text": "city"}],
    }
    assert engine_body(messages=user(result))["messages"] == [
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such\ncity"}
    ]


def test_tools_and_every_tool_choice_map() -> None:
    tool = {
        "name": "weather",
        "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    assert engine_body(tools=[tool])["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": tool["input_schema"],
                "description": "Current weather",
            },
        }
    ]
    choices = {
        "auto": "auto",
        "any": "required",
        "none": "none",
    }
    for kind, expected in choices.items():
        assert engine_body(tool_choice={"type": kind})["tool_choice"] == expected
    named = engine_body(tool_choice={"type": "tool", "name": "weather"})["tool_choice"]
    assert named == {"type": "function", "function": {"name": "weather"}}
    single = engine_body(tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert single["parallel_tool_calls"] is False


def test_server_tools_are_refused() -> None:
    with pytest.raises(Unhonoured) as refused:
        translated(tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert refused.value.field == "tools[0].type"


def test_thinking_switches_the_chat_template() -> None:
    enabled = translated(thinking={"type": "enabled", "budget_tokens": 2048}).request
    assert msgspec.json.decode(enabled.body)["chat_template_kwargs"] == {"enable_thinking": True}
    assert enabled.ignored == ("thinking.budget_tokens",)
    disabled = engine_body(thinking={"type": "disabled"})
    assert disabled["chat_template_kwargs"] == {"enable_thinking": False}


def test_sampling_stop_and_user_map() -> None:
    body = engine_body(
        temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END"], metadata={"user_id": "u1"}
    )
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 40)
    assert body["stop"] == ["END"]
    assert body["user"] == "u1"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": "Hi"}, "messages"),
        ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role"),
        ({"messages": user({"type": "sparkle"})}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]}, "content[0].type"),
        ({"temperature": 3}, "temperature"),
        ({"tool_choice": {"type": "maybe"}}, "tool_choice.type"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ],
)
def test_invalid_requests_are_malformed(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(Malformed, match=message.replace("[", r"\[").replace("]", r"\]")):
        translated(**fields)


def test_a_missing_required_field_is_malformed() -> None:
    with pytest.raises(Malformed, match="max_tokens"):
        anthropic_api.translate("/v1/messages", b'{"model": "m", "messages": []}')
    with pytest.raises(Malformed):
        anthropic_api.translate("/v1/messages", b"not json")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"container": "c1"}, "container"),
        ({"output_config": {"effort": "low"}}, "output_config"),
        ({"metadata": {"tenant": "x"}}, "metadata.tenant"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": user({"type": "document", "source": {}})}, "messages[0].content[0].type"),
        ({"thinking": {"type": "adaptive", "display": "omitted"}}, "thinking.display"),
        (
            {"messages": user({"type": "tool_result", "tool_use_id": "t", "content": [IMAGE]})},
            "messages[0].content[0].content[0]",
        ),
    ],
)
def test_unhonoured_fields_are_named_as_the_client_wrote_them(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(Unhonoured) as refused:
        translated(**fields)
    assert refused.value.field == field
