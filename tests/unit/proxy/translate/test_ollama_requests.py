"""Ollama requests turned into the engine's OpenAI requests, and the ones refused."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from backend.workers.proxy.translate.base import LoadRequest, Malformed, Unhonoured
from backend.workers.proxy.translate.ollama_api import OLLAMA_PATHS, translate
from backend.workers.proxy.translate.ollama_stream import OllamaReply
from tests.unit.proxy.translate.ollama_fakes import (
    MODEL,
    engine_body,
    engine_request,
    now_ns,
    translated,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unhonoured(path: str, **fields: Any) -> str:
    with pytest.raises(Unhonoured) as raised:
        translated(path, **fields)
    return raised.value.field


def test_paths_and_engine_paths() -> None:
    assert OLLAMA_PATHS == ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")
    expected = ("/v1/chat/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/embeddings")
    for path, engine_path in zip(OLLAMA_PATHS, expected, strict=True):
        translation = translated(path)
        assert translation.request.path == engine_path
        assert isinstance(translation.reply, OllamaReply)
        assert translation.reply.stream_content_type == "application/x-ndjson"


def test_chat_streams_by_default_and_asks_for_usage() -> None:
    request, body = engine_request("/api/chat")
    assert request.stream is True
    assert body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_stream_false_is_not_streamed() -> None:
    request, body = engine_request("/api/generate", stream=False)
    assert request.stream is False
    assert "stream" not in body
    assert "stream_options" not in body


def test_embeddings_never_stream() -> None:
    request, body = engine_request("/api/embed", stream=True)
    assert request.stream is False
    assert body == {"model": MODEL, "input": "Hi"}


def test_generate_puts_system_then_prompt() -> None:
    body = engine_body("/api/generate", system="Be brief.", prompt="Why?", stream=False)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Why?"},
    ]


def test_raw_generate_sends_the_prompt_as_is_to_completions() -> None:
    request, body = engine_request(
        "/api/generate", raw=True, prompt="<s>[INST] Hi", options={"num_predict": 3}
    )
    assert request.path == "/v1/completions"
    assert body["prompt"] == "<s>[INST] Hi"
    assert body["max_tokens"] == 3
    assert "messages" not in body


def test_raw_generate_refuses_what_completions_cannot_carry() -> None:
    with pytest.raises(Malformed):
        translated("/api/generate", raw=True, system="x")
    assert unhonoured("/api/generate", raw=True, images=[b64(b"\x89PNG....")]) == "images"
    assert unhonoured("/api/generate", raw=True, format="json") == "format"
    assert unhonoured("/api/generate", raw=True, think=True) == "think"


def test_legacy_embeddings_send_the_prompt_as_input() -> None:
    assert engine_body("/api/embeddings", prompt="text") == {"model": MODEL, "input": "text"}


@pytest.mark.parametrize("value", [-1, -2])
def test_num_predict_without_limit_is_left_out(value: int) -> None:
    assert "max_tokens" not in engine_body("/api/chat", options={"num_predict": value})


def test_stop_as_a_string_and_integral_floats() -> None:
    body = engine_body("/api/chat", options={"stop": "END", "top_k": 40.0, "seed": None})
    assert body["stop"] == "END"
    assert body["top_k"] == 40
    assert "seed" not in body  # null is an option left unset


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": "hot"},
        {"temperature": True},
        {"top_k": 1.5},
        {"stop": [1, 2]},
        {"num_predict": "ten"},
    ],
)
def test_option_of_the_wrong_type_is_malformed(options: dict[str, Any]) -> None:
    with pytest.raises(Malformed):
        translated("/api/chat", options=options)


def test_unknown_option_is_unhonoured_by_name() -> None:
    assert unhonoured("/api/chat", options={"tfs_z": 0.9}) == "options.tfs_z"


def test_load_time_settings_are_ignored_and_named() -> None:
    load_time = (
        *("num_ctx", "num_gpu", "num_thread", "num_batch", "main_gpu", "use_mmap"),
        *("use_mlock", "numa", "low_vram", "f16_kv", "vocab_only", "num_keep"),
    )
    request, body = engine_request(
        "/api/chat",
        options=dict.fromkeys(load_time, 1),
        keep_alive=-1,
        truncate=False,
        shift=False,
    )
    assert set(request.ignored) == {
        *(f"options.{name}" for name in load_time),
        *("keep_alive", "truncate", "shift"),
    }
    assert set(body) == {"model", "messages", "stream", "stream_options"}


def test_embeddings_ignore_sampling_options() -> None:
    request, body = engine_request("/api/embed", options={"temperature": 0, "num_ctx": 512})
    assert request.ignored == ("options.temperature", "options.num_ctx")
    assert "temperature" not in body


def test_invalid_format_is_malformed() -> None:
    with pytest.raises(Malformed):
        translated("/api/chat", format="yaml")
    assert "response_format" not in engine_body("/api/chat", format="")


@pytest.mark.parametrize(("magic", "mime"), [
    (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "image/png"),
    (b"\xff\xd8\xff\xe0\0\x10JFIF\0\x01\x01", "image/jpeg"),
    (b"GIF89a\x01\0\x01\0\0\0", "image/gif"),
    (b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp"),
    (b"\0\0\0\0unknown!", "image/png"),
])  # fmt: skip
def test_image_type_is_read_from_its_first_bytes(magic: bytes, mime: str) -> None:
    image = b64(magic + b"rest of the image")
    body = engine_body("/api/chat", messages=[{"role": "user", "content": "", "images": [image]}])
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{image}"}}
    ]


def test_data_url_images_pass_as_they_are() -> None:
    url = "data:image/jpeg;base64,/9j/4AAQ"
    body = engine_body("/api/generate", prompt="What?", images=[url])
    assert body["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": url}}


def test_image_not_base64_is_malformed() -> None:
    with pytest.raises(Malformed, match=r"messages\[0\]\.images\[0\]"):
        translated("/api/chat", messages=[{"role": "user", "content": "x", "images": ["@@@@"]}])


def test_images_on_an_assistant_message_are_unhonoured() -> None:
    messages = [{"role": "assistant", "content": "x", "images": [b64(b"GIF89a")]}]
    assert unhonoured("/api/chat", messages=messages) == "messages[0].images"


def test_unknown_role_is_unhonoured() -> None:
    assert unhonoured("/api/chat", messages=[{"role": "critic", "content": "x"}]) == (
        "messages[0].role"
    )


def tool_call(name: str, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"function": {"name": name, "arguments": {"q": name}}}
    if call_id:
        call["id"] = call_id
    return call


def test_tool_call_ids_are_kept_or_numbered() -> None:
    calls = [tool_call("a", "theirs"), tool_call("b"), tool_call("c")]
    body = engine_body("/api/chat", messages=[{"role": "assistant", "tool_calls": calls}])
    sent = body["messages"][0]["tool_calls"]
    assert [call["id"] for call in sent] == ["theirs", "call_1", "call_2"]
    assert sent[1] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "b", "arguments": '{"q":"b"}'},
    }
    assert body["messages"][0]["content"] == ""


def test_tool_results_find_the_call_they_answer() -> None:
    messages = [
        {"role": "assistant", "tool_calls": [tool_call("a", "id_a"), tool_call("b", "id_b")]},
        {"role": "tool", "tool_name": "a", "content": "by name"},
        {"role": "tool", "content": "latest call"},
        {"role": "tool", "tool_name": "zzz", "content": "unknown name: latest call"},
        {"role": "tool", "tool_call_id": "explicit", "tool_name": "a", "content": "theirs"},
    ]
    sent = engine_body("/api/chat", messages=messages)["messages"][1:]
    assert [message.get("tool_call_id") for message in sent] == [
        "id_a",
        "id_b",
        "id_b",
        "explicit",
    ]
    assert sent[0] == {"role": "tool", "content": "by name", "tool_call_id": "id_a", "name": "a"}


def test_tool_result_without_any_call_has_no_id() -> None:
    body = engine_body("/api/chat", messages=[{"role": "tool", "content": "42"}])
    assert body["messages"] == [{"role": "tool", "content": "42"}]


def test_tool_calls_on_a_user_message_are_unhonoured() -> None:
    messages = [{"role": "user", "content": "x", "tool_calls": [tool_call("a")]}]
    assert unhonoured("/api/chat", messages=messages) == "messages[0].tool_calls"


def test_tool_call_arguments_must_be_an_object() -> None:
    call = {"function": {"name": "a", "arguments": '{"q": 1}'}}
    with pytest.raises(Malformed):
        translated("/api/chat", messages=[{"role": "assistant", "tool_calls": [call]}])


def test_tools_are_checked_and_given_a_type_when_missing() -> None:
    function = {"name": "f", "parameters": {"type": "object"}}
    body = engine_body("/api/chat", tools=[{"function": function}])
    assert body["tools"] == [{"type": "function", "function": function}]
    with pytest.raises(Malformed, match=r"tools\[0\]"):
        translated("/api/chat", tools=[{"type": "function", "function": {"description": "x"}}])
    assert unhonoured("/api/chat", tools=[{"type": "retrieval", "function": function}]) == (
        "tools[0].type"
    )


@pytest.mark.parametrize("level", ["low", "medium", "high"])
def test_think_levels_are_reasoning_effort(level: str) -> None:
    body = engine_body("/api/chat", think=level)
    assert body["reasoning_effort"] == level
    assert "chat_template_kwargs" not in body


def test_think_max_is_unhonoured_and_nonsense_malformed() -> None:
    assert unhonoured("/api/chat", think="max") == "think"
    with pytest.raises(Malformed):
        translated("/api/chat", think="lots")


@pytest.mark.parametrize(
    "fields",
    [{"context": [1, 2, 3]}, {"suffix": "return x"}, {"template": "{{ .Prompt }}"}],
)
def test_generate_fields_an_engine_cannot_honour(fields: dict[str, Any]) -> None:
    assert unhonoured("/api/generate", **fields) == next(iter(fields))


def test_empty_context_is_no_context() -> None:
    assert engine_body("/api/generate", context=[], suffix="", template="")["messages"]


def test_top_logprobs_out_of_range_is_malformed() -> None:
    with pytest.raises(Malformed):
        translated("/api/chat", logprobs=True, top_logprobs=21)


@pytest.mark.parametrize(
    ("path", "fields", "field"),
    [
        ("/api/embed", {"input": []}, "input"),
        ("/api/embeddings", {"prompt": ""}, "prompt"),
    ],
)
def test_empty_embedding_requests_are_unhonoured(
    path: str, fields: dict[str, Any], field: str
) -> None:
    assert unhonoured(path, **fields) == field


@pytest.mark.parametrize(
    ("path", "fields", "reason"),
    [
        ("/api/chat", {"messages": []}, "load"),
        ("/api/generate", {"prompt": ""}, "load"),
        ("/api/generate", {"prompt": "", "keep_alive": 0}, "unload"),
        ("/api/chat", {"messages": [], "keep_alive": "0s"}, "unload"),
    ],
)
def test_load_requests_are_answered_as_ollama_does(
    path: str, fields: dict[str, Any], reason: str
) -> None:
    # ``ollama run`` loads the model first: an engine PAIR translates for holds its model
    # while it runs, so the door answers the load itself.
    body = msgspec.json.encode({"model": MODEL, **fields})
    with pytest.raises(LoadRequest) as load:
        translate(path, body, now_ns=now_ns)
    answer = msgspec.json.decode(load.value.body)
    assert (answer["model"], answer["done"], answer["done_reason"]) == (MODEL, True, reason)
    assert ("message" in answer) == (path == "/api/chat")
    assert answer["created_at"].endswith("Z")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/chat", b"[]"),
        ("/api/chat", b"{not json"),
        ("/api/chat", b'{"model": "m", "messages": {"role": "user"}}'),
        ("/api/chat", b'{"model": "m", "messages": [{"content": "no role"}]}'),
        ("/api/chat", b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}'),
        ("/api/chat", b'{"messages": [{"role": "user", "content": "x"}]}'),
        ("/api/generate", b'{"model": "m", "prompt": 5}'),
        ("/api/embed", b'{"model": "m", "input": [1, 2]}'),
        ("/api/chat", b'{"model": "m", "messages": [], "options": [1]}'),
    ],
)
def test_malformed_bodies(path: str, body: bytes) -> None:
    with pytest.raises(Malformed):
        translate(path, body, now_ns=now_ns)


def test_unknown_top_level_fields_are_ignored_as_ollama_does() -> None:
    assert engine_body("/api/chat", stream=False, whatever=1) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
    }
