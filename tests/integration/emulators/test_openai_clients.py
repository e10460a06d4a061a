"""The official ``openai`` client against the OpenAI layers of the Ollama emulator and the LM
Studio emulator, each standing in for its real engine."""

from __future__ import annotations

import base64
import struct

import openai
import pytest

from tests.integration.emulators.conftest import Emulator

MESSAGES = [{"role": "user", "content": "Say something"}]


def _client(emulator: Emulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{emulator.url}/v1", api_key="x", max_retries=0)


@pytest.fixture(params=["ollama", "lmstudio"])
def emulator(request: pytest.FixtureRequest) -> Emulator:
    """Each engine emulator in turn."""
    name = "ollama_emulator" if request.param == "ollama" else "lmstudio_emulator"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def _chat_model(emulator: Emulator) -> str:
    return (
        "llama3.2"
        if "ollama" in type(emulator.engine).__name__.lower()
        else ("qwen2.5-7b-instruct")
    )


async def test_openai_client_lists_models_of_each_engine_emulator(emulator: Emulator) -> None:
    async with _client(emulator) as client:
        models = [model.id async for model in client.models.list()]
    assert any(name.startswith(_chat_model(emulator)) for name in models)


async def test_openai_client_chat_streamed_equals_non_streamed_on_each_engine_emulator(
    emulator: Emulator,
) -> None:
    model = _chat_model(emulator)
    async with _client(emulator) as client:
        whole = await client.chat.completions.create(model=model, messages=MESSAGES, seed=7)
        stream = await client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            seed=7,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert whole.choices[0].finish_reason == "stop" and whole.usage is not None
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [reason for reason in finishes if reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].choices == []


async def test_openai_client_max_tokens_gives_finish_reason_length(emulator: Emulator) -> None:
    async with _client(emulator) as client:
        reply = await client.chat.completions.create(
            model=_chat_model(emulator), messages=MESSAGES, max_tokens=2
        )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 2


async def test_openai_client_unknown_model_is_not_found_on_each_engine_emulator(
    emulator: Emulator,
) -> None:
    async with _client(emulator) as client:
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="ghost-model", messages=MESSAGES)


async def test_openai_client_completions_and_embeddings_on_the_ollama_emulator(
    ollama_emulator: Emulator,
) -> None:
    async with _client(ollama_emulator) as client:
        completion = await client.completions.create(model="llama3.2", prompt="Once")
        vectors = await client.embeddings.create(model="nomic-embed-text", input=["a", "b"])
        encoded = await client.embeddings.create(
            model="nomic-embed-text", input="a", encoding_format="base64"
        )
    assert completion.object == "text_completion" and completion.choices[0].text
    assert [item.index for item in vectors.data] == [0, 1]
    assert len(vectors.data[0].embedding) == 768
    raw = base64.b64decode(str(encoded.data[0].embedding))
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert decoded == pytest.approx(vectors.data[0].embedding, abs=1e-6)


async def test_openai_client_completions_and_embeddings_on_the_lmstudio_emulator(
    lmstudio_emulator: Emulator,
) -> None:
    async with _client(lmstudio_emulator) as client:
        completion = await client.completions.create(model="qwen2.5-7b-instruct", prompt="Once")
        vectors = await client.embeddings.create(
            model="text-embedding-nomic-embed-text-v1.5", input="hello"
        )
    assert completion.object == "text_completion" and completion.choices[0].text
    assert len(vectors.data) == 1 and len(vectors.data[0].embedding) == 768
