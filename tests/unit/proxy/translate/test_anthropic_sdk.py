"""The official ``anthropic`` client reads the translated answers: its own SSE parser and event
accumulation build the final Message from the translator's bytes (an in-memory transport
stands in for the network)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import httpx2
import msgspec
import pytest

from backend.workers.proxy.translate import anthropic_api
from tests.unit.proxy.translate.anthropic_fakes import (
    DONE,
    chunk,
    completion,
    now_ns,
    tool_call_chunks,
    usage_chunk,
)

ENGINE_STREAM = (
    chunk({"role": "assistant", "content": ""})
    + chunk({"reasoning_content": "The user wants weather."})
    + chunk({"content": "Let me check "})
    + chunk({"content": "Paris ☀."})
    + tool_call_chunks(0, "call_w", "weather", ['{"ci', 'ty": "Pa', 'ris", "days": 2}'])
    + chunk({}, finish="tool_calls")
    + usage_chunk(21, 9)
    + DONE
)
WEATHER_TOOL = {"name": "weather", "input_schema": {"type": "object"}}


def client_for(answer: Callable[[bytes], httpx2.Response]) -> anthropic.Anthropic:
    """A real client whose requests are translated and answered by ``answer``."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        return answer(request.read())

    transport = httpx2.MockTransport(handle)
    return anthropic.Anthropic(
        api_key="unused",
        base_url="http://pair.test",
        http_client=httpx2.Client(transport=transport),
    )


def streamed_by(step: int) -> Callable[[bytes], httpx2.Response]:
    """Answers with the translated ENGINE_STREAM, fed to the translator ``step`` bytes at a time."""

    def answer(body: bytes) -> httpx2.Response:
        translation = anthropic_api.translate("/v1/messages", body, now_ns=now_ns)
        assert translation.request.stream

        def pieces() -> Iterator[bytes]:
            for start in range(0, len(ENGINE_STREAM), step):
                piece = translation.reply.chunk(ENGINE_STREAM[start : start + step])
                if piece:
                    yield piece

        headers = {"content-type": translation.reply.stream_content_type}
        return httpx2.Response(200, headers=headers, content=pieces())

    return answer


@pytest.mark.parametrize("step", [1, len(ENGINE_STREAM)], ids=["byte_by_byte", "one_piece"])
def test_the_sdk_accumulates_the_translated_stream(step: int) -> None:
    client = client_for(streamed_by(step))
    with client.messages.stream(
        model="qwen3:0.6b",
        max_tokens=128,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    ) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    client.close()
    assert "".join(texts) == "Let me check Paris ☀."
    assert message.id == "msg_abc123"
    assert message.model == "qwen3:0.6b"
    thinking, text, tool_use = message.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants weather."
    assert text.type == "text" and text.text == "Let me check Paris ☀."
    assert tool_use.type == "tool_use"
    assert (tool_use.id, tool_use.name) == ("call_w", "weather")
    assert tool_use.input == {"city": "Paris", "days": 2}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 9)


def test_the_sdk_reads_a_translated_whole_answer() -> None:
    call = {"id": "call_x", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    engine_answer = completion({"content": "Sure.", "tool_calls": [call]}, finish="tool_calls")

    def answer(body: bytes) -> httpx2.Response:
        translation = anthropic_api.translate("/v1/messages", body, now_ns=now_ns)
        assert not translation.request.stream
        assert msgspec.json.decode(translation.request.body)["max_tokens"] == 32
        headers = {"content-type": "application/json"}
        return httpx2.Response(200, headers=headers, content=translation.reply.whole(engine_answer))

    client = client_for(answer)
    message = client.messages.create(
        model="qwen3:0.6b", max_tokens=32, messages=[{"role": "user", "content": "Weather?"}]
    )
    client.close()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 7)
