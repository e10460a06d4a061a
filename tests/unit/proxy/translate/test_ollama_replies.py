"""The engine's OpenAI answers turned into Ollama's, whole and streamed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ollama import ChatResponse, EmbeddingsResponse, EmbedResponse, GenerateResponse

from backend.workers.proxy.translate.ollama_api import translate
from backend.workers.proxy.translate.ollama_replies import EngineAnswerInvalid, created_at
from backend.workers.proxy.translate.ollama_stream import OllamaReply
from tests.unit.proxy.translate.ollama_fakes import (
    LLAMA_SERVER_STREAM,
    MODEL,
    NOW,
    USAGE_CHUNK,
    chunk,
    ndjson,
    sse,
    translated,
)

STAMP = "2026-12-04T17:00:00.123456789Z"


def reply(path: str = "/api/chat", **fields: Any) -> OllamaReply:
    translator = translated(path, **fields).reply
    assert isinstance(translator, OllamaReply)
    return translator


def bytewise(translator: OllamaReply, data: bytes) -> bytes:
    return b"".join(translator.chunk(data[i : i + 1]) for i in range(len(data)))


EXPECTED_LLAMA_SERVER_RECORDS = [
    {"message": {"role": "assistant", "content": "", "thinking": "The user greets"}},
    {"message": {"role": "assistant", "content": "", "thinking": " me."}},
    {"message": {"role": "assistant", "content": "Hé"}},
    {"message": {"role": "assistant", "content": "llo 👋"}},
    {"message": {"role": "assistant", "content": " – ça va?"}},
]


def test_llama_server_stream_whole_and_byte_by_byte_give_the_same_ndjson() -> None:
    at_once = reply().chunk(LLAMA_SERVER_STREAM)
    assert bytewise(reply(), LLAMA_SERVER_STREAM) == at_once
    records = ndjson(at_once)
    head = {"model": MODEL, "created_at": STAMP}
    assert records[:-1] == [{**head, **r, "done": False} for r in EXPECTED_LLAMA_SERVER_RECORDS]
    assert records[-1] == {
        **head,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "stop",
        "total_duration": 92_750_000,
        "load_duration": 0,
        "prompt_eval_count": 9,
        "prompt_eval_duration": 12_500_000,
        "eval_count": 12,
        "eval_duration": 80_250_000,
    }


@pytest.mark.parametrize("size", [2, 3, 7, 64])
def test_any_cut_of_the_stream_gives_the_same_ndjson(size: int) -> None:
    data = LLAMA_SERVER_STREAM
    translator = reply()
    pieces = b"".join(translator.chunk(data[i : i + size]) for i in range(0, len(data), size))
    assert pieces == reply().chunk(data)


def test_records_come_out_as_their_lines_complete() -> None:
    translator = reply()
    first = sse(chunk({"content": "Hi"}))
    assert translator.chunk(first[:10]) == b""
    assert ndjson(translator.chunk(first[10:]))[0]["message"]["content"] == "Hi"


def test_done_comes_only_from_done_not_from_the_finish_or_usage() -> None:
    translator = reply()
    assert translator.chunk(sse(chunk({"content": "x"}), chunk({}, "length"), USAGE_CHUNK))
    assert translator.chunk(b"") == b""
    final = ndjson(translator.chunk(b"data: [DONE]\n\n"))
    assert [record["done"] for record in final] == [True]
    assert final[0]["done_reason"] == "length"
    assert translator.chunk(sse(chunk({"content": "late"}))) == b""


def test_a_stream_cut_before_done_has_no_final_record() -> None:
    records = ndjson(reply().chunk(sse(chunk({"content": "x"}), chunk({}, "stop"))))
    assert all(record["done"] is False for record in records)


def test_engine_error_in_the_stream_ends_it_with_an_error_line() -> None:
    translator = reply()
    error = {"error": {"code": 500, "message": 'context "full"', "type": "server_error"}}
    out = translator.chunk(sse(chunk({"content": "x"}), error, chunk({"content": "y"})))
    assert ndjson(out)[-1] == {"error": 'context "full"'}
    assert len(ndjson(out)) == 2
    assert translator.chunk(b"data: [DONE]\n\n") == b""


def test_error_as_a_plain_string_and_a_record_that_is_not_json() -> None:
    assert ndjson(reply().chunk(sse({"error": "boom"}))) == [{"error": "boom"}]
    out = ndjson(reply().chunk(b"data: {oops\n\n"))
    assert list(out[0]) == ["error"]


def test_comments_event_fields_and_blank_lines_are_skipped() -> None:
    data = b": keep-alive\r\n\r\nevent: message\nid: 4\n" + sse(chunk({"content": "a"}))
    assert [r["message"]["content"] for r in ndjson(reply().chunk(data))] == ["a"]


def test_error_record_is_json_with_a_newline() -> None:
    assert reply().error_record('engine "x" went away\n') == (
        b'{"error":"engine \\"x\\" went away\\n"}\n'
    )


def tool_piece(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        piece.update(id=call_id, type="function")
    if name:
        piece["function"]["name"] = name
    return chunk({"tool_calls": [piece]})


def test_streamed_tool_calls_are_gathered_into_one_record_at_the_finish() -> None:
    translator = reply()
    pieces = sse(
        tool_piece(0, "c0", "get_weather", '{"ci'),
        tool_piece(1, "c1", "get_time", ""),
        tool_piece(0, None, None, 'ty": "Paris"}'),
        tool_piece(1, None, None, '{"tz": "CET"}'),
    )
    assert translator.chunk(pieces) == b""
    out = ndjson(translator.chunk(sse(chunk({}, "tool_calls"))))
    assert out == [
        {
            "model": MODEL,
            "created_at": STAMP,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c0",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    },
                    {"id": "c1", "function": {"name": "get_time", "arguments": {"tz": "CET"}}},
                ],
            },
            "done": False,
        }
    ]
    final = ndjson(translator.chunk(sse(USAGE_CHUNK, "[DONE]")))
    assert final[-1]["done_reason"] == "stop"


def test_tool_calls_without_a_finish_are_sent_before_the_final_record() -> None:
    out = ndjson(reply().chunk(sse(tool_piece(0, "c0", "f", "{}"), "[DONE]")))
    assert out[0]["message"]["tool_calls"] == [
        {"id": "c0", "function": {"name": "f", "arguments": {}}}
    ]
    assert out[1]["done"] is True


def test_streamed_tool_arguments_that_are_not_an_object_end_the_stream() -> None:
    out = ndjson(reply().chunk(sse(tool_piece(0, "c0", "f", "[1]"), chunk({}, "tool_calls"))))
    assert list(out[-1]) == ["error"]


def test_generate_streams_response_and_thinking() -> None:
    out = ndjson(
        reply("/api/generate").chunk(
            sse(chunk({"reasoning": "hm"}), chunk({"content": "Yes"}), USAGE_CHUNK, "[DONE]")
        )
    )
    assert out[0] == {
        "model": MODEL,
        "created_at": STAMP,
        "response": "",
        "thinking": "hm",
        "done": False,
    }
    assert out[1]["response"] == "Yes"
    assert out[2]["response"] == ""
    assert out[2]["done"] is True
    assert "context" not in out[2]


def test_raw_generate_streams_completion_text() -> None:
    translator = reply("/api/generate", raw=True)
    out = ndjson(translator.chunk(sse({"choices": [{"index": 0, "text": "Hi"}]}, "[DONE]")))
    assert [record["response"] for record in out] == ["Hi", ""]


def test_streamed_logprobs_pass_to_the_record() -> None:
    logprob = {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}
    record = chunk({"content": "a"})
    record["choices"][0]["logprobs"] = {"content": [logprob]}
    assert ndjson(reply().chunk(sse(record)))[0]["logprobs"] == [logprob]


def whole(path: str, answer: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        reply(path, stream=False, **fields).whole(json.dumps(answer).encode())
    )
    return out


def chat_answer(message: dict[str, Any], finish_reason: str | None = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "engine-side-name",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }


def test_whole_chat_answer() -> None:
    answer = chat_answer({"role": "assistant", "content": "Hi!", "reasoning_content": "greet"})
    assert whole("/api/chat", answer) == {
        "model": MODEL,
        "created_at": STAMP,
        "message": {"role": "assistant", "content": "Hi!", "thinking": "greet"},
        "done": True,
        "done_reason": "stop",
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_count": 4,
        "prompt_eval_duration": 0,
        "eval_count": 2,
        "eval_duration": 0,
    }


@pytest.mark.parametrize(
    ("finish_reason", "done_reason"),
    [("stop", "stop"), ("length", "length"), ("tool_calls", "stop"), (None, "stop")],
)
def test_done_reason(finish_reason: str | None, done_reason: str) -> None:
    answer = chat_answer({"role": "assistant", "content": "x"}, finish_reason)
    assert whole("/api/chat", answer)["done_reason"] == done_reason


def test_total_duration_without_timings_is_measured_from_translation() -> None:
    ticks = iter([NOW, NOW + 2_500_000])
    translation = translate(
        "/api/chat",
        b'{"model":"m","messages":[{"role":"user","content":"x"}]}',
        now_ns=lambda: next(ticks),
    )
    body = json.dumps(chat_answer({"role": "assistant", "content": "x"})).encode()
    answer = json.loads(translation.reply.whole(body))
    assert answer["total_duration"] == 2_500_000
    assert answer["prompt_eval_duration"] == answer["eval_duration"] == 0


def test_whole_tool_calls_have_object_arguments() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"n": 1}'}}
    answer = chat_answer({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    message = whole("/api/chat", answer)["message"]
    assert message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c9", "function": {"name": "f", "arguments": {"n": 1}}}],
    }


def test_whole_generate_answer_has_response_and_no_context() -> None:
    answer = chat_answer({"role": "assistant", "content": "Blue.", "reasoning": "sky"})
    out = whole("/api/generate", answer)
    assert out["response"] == "Blue."
    assert out["thinking"] == "sky"
    assert "message" not in out
    assert "context" not in out


def test_whole_raw_generate_answer() -> None:
    answer = {"choices": [{"index": 0, "text": " world", "finish_reason": "length"}]}
    out = whole("/api/generate", answer, raw=True)
    assert (out["response"], out["done_reason"], out["eval_count"]) == (" world", "length", 0)


def test_whole_embed_answer_in_index_order() -> None:
    answer = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 1, "embedding": [0.5, -1]},
            {"object": "embedding", "index": 0, "embedding": [1e-3, 2]},
        ],
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    }
    assert whole("/api/embed", answer, input=["a", "b"]) == {
        "model": MODEL,
        "embeddings": [[1e-3, 2], [0.5, -1]],
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_count": 6,
    }
    assert whole("/api/embeddings", answer) == {"embedding": [1e-3, 2]}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"choices": "none"}',
        json.dumps(
            chat_answer(
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "1"}}]}
            )
        ).encode(),
    ],
)
def test_unreadable_whole_answer_raises(body: bytes) -> None:
    with pytest.raises(EngineAnswerInvalid):
        reply(stream=False).whole(body)


@pytest.mark.parametrize(
    ("ns", "stamp"),
    [
        (NOW, STAMP),
        (1_796_403_600_120_000_000, "2026-12-04T17:00:00.12Z"),
        (1_796_403_600_000_000_000, "2026-12-04T17:00:00Z"),
    ],
)
def test_created_at_is_go_rfc3339_nano(ns: int, stamp: str) -> None:
    assert created_at(ns) == stamp


def test_the_official_ollama_client_reads_every_answer() -> None:
    """The ``ollama`` package's own response models accept what the translation writes."""
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"n": 1}'}}
    answer = chat_answer({"role": "assistant", "content": "x", "tool_calls": [call]})
    chat = ChatResponse.model_validate(whole("/api/chat", answer))
    assert chat.message.tool_calls is not None
    assert chat.message.tool_calls[0].function.arguments == {"n": 1}
    for record in ndjson(reply().chunk(LLAMA_SERVER_STREAM)):
        ChatResponse.model_validate(record)
    for record in ndjson(reply("/api/generate").chunk(LLAMA_SERVER_STREAM)):
        GenerateResponse.model_validate(record)
    assert GenerateResponse.model_validate(whole("/api/generate", answer)).response == "x"
    vectors = {"data": [{"index": 0, "embedding": [0.5]}], "usage": {"prompt_tokens": 1}}
    assert EmbedResponse.model_validate(whole("/api/embed", vectors)).embeddings == [[0.5]]
    assert EmbeddingsResponse.model_validate(whole("/api/embeddings", vectors)).embedding == [0.5]
