"""The official ``ollama`` Python client against the Ollama emulator standing in for Ollama.

The sync client runs in a worker thread (``asyncio.to_thread``) because the emulator serves on
this test's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ollama
import pytest

from tests.integration.emulators.conftest import Emulator, StartOllama


def _client(emulator: Emulator) -> ollama.Client:
    return ollama.Client(host=emulator.url)


async def test_ollama_emulator_lists_installed_models_like_ollama(
    ollama_emulator: Emulator,
) -> None:
    listed = await asyncio.to_thread(_client(ollama_emulator).list)
    names = [model.model for model in listed.models]
    assert names == ["llama3.2:latest", "nomic-embed-text:latest"]
    first = listed.models[0]
    assert first.details is not None and first.details.family == "llama"
    assert first.details.parameter_size == "3.2B" and first.details.quantization_level == "Q4_K_M"
    assert first.size and first.size > 1_000_000_000
    assert first.digest and len(first.digest) == 64


async def test_ollama_emulator_show_and_unknown_model_error_match_ollama(
    ollama_emulator: Emulator,
) -> None:
    client = _client(ollama_emulator)
    shown = await asyncio.to_thread(client.show, "llama3.2")
    assert shown.capabilities is not None and "completion" in shown.capabilities
    assert shown.modelinfo is not None and shown.modelinfo["general.architecture"] == "llama"
    with pytest.raises(ollama.ResponseError) as error:
        await asyncio.to_thread(client.show, "missing-model")
    assert (error.value.status_code, error.value.error) == (404, "model 'missing-model' not found")


async def test_ollama_emulator_generate_unknown_model_is_a_404_response_error(
    ollama_emulator: Emulator,
) -> None:
    with pytest.raises(ollama.ResponseError) as error:
        await asyncio.to_thread(_client(ollama_emulator).generate, "nope", "hi")
    assert error.value.status_code == 404
    assert error.value.error == "model 'nope' not found"


async def test_ollama_emulator_generate_streamed_text_equals_non_streamed(
    ollama_emulator: Emulator,
) -> None:
    client = _client(ollama_emulator)
    whole = await asyncio.to_thread(client.generate, "llama3.2", "Why is the sky blue?")
    parts = await asyncio.to_thread(
        lambda: list(client.generate("llama3.2", "Why is the sky blue?", stream=True))
    )
    assert [part.done for part in parts].count(True) == 1 and parts[-1].done
    assert "".join(part.response or "" for part in parts) == whole.response
    assert whole.done_reason == "stop" and whole.eval_count == len(parts) - 1
    final = parts[-1]
    for metric in ("total_duration", "load_duration", "prompt_eval_count", "eval_duration"):
        assert isinstance(getattr(final, metric), int) and getattr(final, metric) > 0
    assert all(part.total_duration is None for part in parts[:-1]), "metrics only at the end"


async def test_ollama_emulator_num_predict_caps_with_done_reason_length(
    ollama_emulator: Emulator,
) -> None:
    reply = await asyncio.to_thread(
        _client(ollama_emulator).generate, "llama3.2", "count", options={"num_predict": 3}
    )
    assert (reply.done_reason, reply.eval_count) == ("length", 3)


async def test_ollama_emulator_chat_with_the_async_client(ollama_emulator: Emulator) -> None:
    async_client = ollama.AsyncClient(host=ollama_emulator.url)
    messages = [{"role": "user", "content": "Hello"}]
    whole = await async_client.chat("llama3.2", messages=messages)
    pieces = [part async for part in await async_client.chat("llama3.2", messages, stream=True)]
    assert whole.message.role == "assistant" and whole.done_reason == "stop"
    assert "".join(part.message.content or "" for part in pieces) == whole.message.content
    assert pieces[-1].done and pieces[-1].eval_count == len(pieces) - 1


async def test_ollama_emulator_keep_alive_load_and_unload_show_in_ps(
    ollama_emulator: Emulator,
) -> None:
    client = _client(ollama_emulator)
    assert (await asyncio.to_thread(client.ps)).models == []
    loaded = await asyncio.to_thread(client.generate, "llama3.2", "")
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    running = (await asyncio.to_thread(client.ps)).models
    assert [model.name for model in running] == ["llama3.2:latest"]
    assert running[0].context_length == 4096 and running[0].expires_at is not None
    unloaded = await asyncio.to_thread(lambda: client.generate("llama3.2", keep_alive=0))
    assert unloaded.done_reason == "unload"
    assert (await asyncio.to_thread(client.ps)).models == []


async def test_ollama_emulator_keep_alive_forever_expires_centuries_ahead(
    ollama_emulator: Emulator,
) -> None:
    client = _client(ollama_emulator)
    await asyncio.to_thread(lambda: client.generate("llama3.2", "", keep_alive=-1))
    (model,) = (await asyncio.to_thread(client.ps)).models
    assert model.expires_at is not None and model.expires_at.year >= 2290


async def test_ollama_emulator_pull_streams_growing_progress_then_installs(
    start_ollama: StartOllama,
) -> None:
    emulator = await start_ollama(pull_seconds=0.3)
    client = _client(emulator)
    progress = await asyncio.to_thread(lambda: list(client.pull("qwen2.5:0.5b", stream=True)))
    statuses = [part.status for part in progress]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    layers: dict[str, list[int]] = {}
    for part in progress:
        if part.digest:
            assert part.status == f"pulling {part.digest[7:19]}" and part.digest.startswith(
                "sha256:"
            )
            layers.setdefault(part.digest, []).append(part.completed or 0)
            assert (part.completed or 0) <= (part.total or 0)
    weights = max(layers.values(), key=len)
    assert weights == sorted(weights) and len(set(weights)) > 2, "completed grows"
    names = [model.model for model in (await asyncio.to_thread(client.list)).models]
    assert "qwen2.5:0.5b" in names


async def test_ollama_emulator_pull_of_an_unknown_model_raises_the_manifest_error(
    ollama_emulator: Emulator,
) -> None:
    def pull() -> list[Any]:
        return list(_client(ollama_emulator).pull("no-such-model-anywhere", stream=True))

    with pytest.raises(ollama.ResponseError, match="pull model manifest: file does not exist"):
        await asyncio.to_thread(pull)


async def test_ollama_emulator_delete_and_copy_return_success(ollama_emulator: Emulator) -> None:
    client = _client(ollama_emulator)
    assert (await asyncio.to_thread(client.copy, "llama3.2", "mine:v1")).status == "success"
    assert (await asyncio.to_thread(client.delete, "llama3.2")).status == "success"
    names = [model.model for model in (await asyncio.to_thread(client.list)).models]
    assert "llama3.2:latest" not in names and "mine:v1" in names
    with pytest.raises(ollama.ResponseError) as error:
        await asyncio.to_thread(client.delete, "llama3.2")
    assert error.value.status_code == 404


async def test_ollama_emulator_embed_returns_unit_vectors(ollama_emulator: Emulator) -> None:
    result = await asyncio.to_thread(
        _client(ollama_emulator).embed, "nomic-embed-text", ["first text", "second text"]
    )
    assert len(result.embeddings) == 2 and len(result.embeddings[0]) == 768
    assert abs(sum(value * value for value in result.embeddings[0]) - 1.0) < 1e-3
    assert result.embeddings[0] != result.embeddings[1]


async def test_ollama_emulator_refuses_chat_on_an_embedding_model(
    ollama_emulator: Emulator,
) -> None:
    with pytest.raises(ollama.ResponseError) as error:
        await asyncio.to_thread(
            _client(ollama_emulator).chat, "nomic-embed-text", [{"role": "user", "content": "x"}]
        )
    assert (error.value.status_code, error.value.error) == (
        400,
        '"nomic-embed-text" does not support chat',
    )
