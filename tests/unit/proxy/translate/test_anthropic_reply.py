"""Engine answers (OpenAI) become Anthropic Messages answers, whole and streamed."""

from __future__ import annotations

import msgspec
import pytest

from tests.unit.proxy.translate.anthropic_fakes import (
    DONE,
    chunk,
    completion,
    events,
    feed,
    stream_events,
    tool_call_chunks,
    translated,
    usage_chunk,
)

TEXT_STREAM = (
    b": keep-alive\n\n"
    + chunk({"role": "assistant", "content": None})
    + chunk({"content": "Héllo"})
    + chunk({"content": " wörld"})
    + chunk({}, finish="stop")
    + usage_chunk(12, 3)
    + DONE
)


def whole(body: bytes) -> dict[str, object]:
    answer: dict[str, object] = msgspec.json.decode(translated().reply.whole(body))
    return answer


def test_a_whole_answer_is_an_anthropic_message() -> None:
    assert whole(completion({"role": "assistant", "content": "Hello"})) == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": "qwen3:0.6b",
        "content": [{"type": "text", "text": "Hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


def test_a_whole_answer_carries_thinking_then_text_then_tool_calls() -> None:
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
    }
    message = {"content": "Checking.", "reasoning_content": "Paris.", "tool_calls": [call]}
    answer = whole(completion(message, finish="tool_calls"))
    assert answer["content"] == [
        {"type": "thinking", "thinking": "Paris.", "signature": ""},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_9", "name": "weather", "input": {"city": "Paris"}},
    ]
    assert answer["stop_reason"] == "tool_use"


def test_reasoning_under_the_ollama_name_is_thinking_too() -> None:
    answer = whole(completion({"content": "4", "reasoning": "2+2"}))
    assert answer["content"] == [
        {"type": "thinking", "thinking": "2+2", "signature": ""},
        {"type": "text", "text": "4"},
    ]


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        (None, "end_turn"),
    ],
)
def test_finish_reasons_become_stop_reasons(finish: str | None, stop_reason: str) -> None:
    body = completion({"content": "x"}, finish=finish)  # type: ignore[arg-type]
    assert whole(body)["stop_reason"] == stop_reason
    stream = chunk({"content": "x"}) + chunk({}, finish=finish) + DONE
    assert stream_events(stream)[-2][1]["delta"]["stop_reason"] == stop_reason


def test_a_matched_stop_string_the_engine_names_is_a_stop_sequence() -> None:
    answer = whole(completion({"content": "x"}, stop_reason="END"))
    assert (answer["stop_reason"], answer["stop_sequence"]) == ("stop_sequence", "END")


def test_an_answer_without_an_id_gets_one() -> None:
    body = msgspec.json.encode(
        {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    )
    assert whole(body)["id"] == "msg_abc"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_a_stream_cut_anywhere_gives_the_same_events(step: int) -> None:
    assert [name for name, _ in stream_events(TEXT_STREAM, step)] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    received = stream_events(TEXT_STREAM, step)
    texts = [data["delta"]["text"] for name, data in received if name == "content_block_delta"]
    assert "".join(texts) == "Héllo wörld"
    assert received[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 3, "input_tokens": 12},
    }


def test_crlf_line_ends_are_read() -> None:
    crlf = TEXT_STREAM.replace(b"\n", b"\r\n")
    assert stream_events(crlf, 5) == stream_events(TEXT_STREAM, 5)


def test_the_first_record_starts_the_message() -> None:
    start = stream_events(chunk({"role": "assistant"}))
    assert start == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_abc123",
                    "type": "message",
                    "role": "assistant",
                    "model": "qwen3:0.6b",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                },
            },
        )
    ]


def test_blocks_change_with_the_kind_of_delta() -> None:
    stream = (
        chunk({"reasoning_content": "Think"})
        + chunk({"reasoning": "ing."})
        + chunk({"content": "Answer."})
        + tool_call_chunks(0, "call_a", "first", ['{"n"', ": 1}"])
        + tool_call_chunks(1, "call_b", "second", ["{}"])
        + chunk({}, finish="tool_calls")
        + DONE
    )
    received = stream_events(stream, 4)
    starts = [data for name, data in received if name == "content_block_start"]
    assert [(data["index"], data["content_block"]) for data in starts] == [
        (0, {"type": "thinking", "thinking": "", "signature": ""}),
        (1, {"type": "text", "text": ""}),
        (2, {"type": "tool_use", "id": "call_a", "name": "first", "input": {}}),
        (3, {"type": "tool_use", "id": "call_b", "name": "second", "input": {}}),
    ]
    deltas = [
        (data["index"], data["delta"]) for name, data in received if name == "content_block_delta"
    ]
    assert deltas[:5] == [
        (0, {"type": "thinking_delta", "thinking": "Think"}),
        (0, {"type": "thinking_delta", "thinking": "ing."}),
        (1, {"type": "text_delta", "text": "Answer."}),
        (2, {"type": "input_json_delta", "partial_json": '{"n"'}),
        (2, {"type": "input_json_delta", "partial_json": ": 1}"}),
    ]
    stops = [data["index"] for name, data in received if name == "content_block_stop"]
    assert stops == [0, 1, 2, 3]


def test_whole_tool_calls_without_an_index_are_separate_blocks() -> None:
    calls = [
        {"id": "call_a", "function": {"name": "first", "arguments": {"n": 1}}},
        {"id": "call_b", "function": {"name": "second", "arguments": "{}"}},
    ]
    received = stream_events(chunk({"tool_calls": calls}) + chunk({}, finish="stop") + DONE)
    starts = [data["content_block"] for name, data in received if name == "content_block_start"]
    assert [(block["id"], block["name"]) for block in starts] == [
        ("call_a", "first"),
        ("call_b", "second"),
    ]
    deltas = [data["delta"] for name, data in received if name == "content_block_delta"]
    assert [delta["partial_json"] for delta in deltas] == ['{"n":1}', "{}"]
    assert received[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_the_message_ends_only_on_the_engines_done() -> None:
    without_done = TEXT_STREAM.removesuffix(DONE)
    names = [name for name, _ in stream_events(without_done)]
    assert "message_delta" not in names and "message_stop" not in names
    reply = translated(stream=True).reply
    feed(reply, without_done, 3)
    assert events(reply.chunk(DONE))[-1] == ("message_stop", {"type": "message_stop"})
    assert reply.chunk(TEXT_STREAM) == b""


def test_an_engine_error_in_the_stream_is_the_last_event() -> None:
    error = (
        b'data: {"error": {"code": 500, "message": "out of memory", "type": "server_error"}}\n\n'
    )
    received = stream_events(chunk({"content": "Hi"}) + error + chunk({"content": "more"}) + DONE)
    assert received[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "out of memory"}},
    )
    assert [name for name, _ in received].count("error") == 1


def test_a_cut_stream_ends_with_the_error_record() -> None:
    reply = translated(stream=True).reply
    reply.chunk(chunk({"content": "Hi"}))
    assert events(reply.error_record("engine went away")) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "engine went away"}})
    ]
    assert reply.chunk(DONE) == b""


def test_an_empty_stream_still_starts_and_ends_the_message() -> None:
    names = [name for name, _ in stream_events(DONE)]
    assert names == ["message_start", "message_delta", "message_stop"]


def test_an_unreadable_whole_answer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="JSON"):
        translated().reply.whole(b"<html>busy</html>")
