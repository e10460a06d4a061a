"""engine-apis.md §6 (OpenAI /v1 items) through the LM Studio and llama.cpp front doors.

The LM Studio emulator stands behind the ``openai`` door, a real llama-server (the tiny
generated model, embeddings on) behind the ``llamacpp`` door; tests of the items llama-server
supports run against both. One proxy per engine per module keeps the suite fast.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai
import pytest
import pytest_asyncio

from backend.devtools.emulators.server import EmulatorServer
from tests.integration.proxy.conformance import (
    CHAT_MODEL,
    LLAMA_ALIAS,
    MESSAGES,
    SLOW_TOKEN_DELAY,
    OpenAIDoor,
    check_cors_preflight,
    expect_failure_on,
    fast_lmstudio_behind_door,
    launch_healthy_llama_server,
    llama_server_behind_door,
    mid_stream_failure_app,
    serving_proxy,
    slow_lmstudio_behind_door,
    sse_events,
    stream_chunks,
)
from tests.integration.proxy.conftest import local

if TYPE_CHECKING:
    # Annotations only: pytest must import the fixtures module first, as a plugin.
    from tests.engines.fixtures import LlamaServer

pytest_plugins = ["tests.engines.fixtures"]
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lmstudio_door() -> AsyncIterator[OpenAIDoor]:
    """A fast LM Studio emulator (a chat and an embedding model) behind the OpenAI door."""
    async with fast_lmstudio_behind_door() as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_lmstudio_door() -> AsyncIterator[OpenAIDoor]:
    """An emulator writing one token per ``SLOW_TOKEN_DELAY`` (400 tokens unless capped)."""
    async with slow_lmstudio_behind_door() as running:
        yield running


@pytest.fixture(scope="module")
def llama_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer | str]:
    """A real llama-server on the tiny model (embeddings on); the skip reason without one."""
    from tests.engines.fixtures import stop_llama_server

    try:
        binary: Path = request.getfixturevalue("llama_server_binary")
    except pytest.skip.Exception as skipped:
        yield str(skipped)
        return
    # Mean pooling: the tiny model has none, and llama-server refuses OpenAI embeddings without.
    extra = ("--embeddings", "--pooling", "mean", "--alias", LLAMA_ALIAS)
    server = launch_healthy_llama_server(
        binary,
        request.getfixturevalue("tiny_model_path"),
        tmp_path_factory.mktemp("llama-server"),
        parallel=2,
        context=1024,
        extra_args=extra,
    )
    yield server
    stop_llama_server(server)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llamacpp_door(llama_server: LlamaServer | str) -> AsyncIterator[OpenAIDoor | str]:
    """The real llama-server behind the llama.cpp door (or the reason there is none)."""
    if isinstance(llama_server, str):
        yield llama_server
        return
    async with llama_server_behind_door(llama_server) as running:
        yield running


@pytest.fixture(params=["openai", "llamacpp"])
def door(
    request: pytest.FixtureRequest, lmstudio_door: OpenAIDoor, llamacpp_door: OpenAIDoor | str
) -> OpenAIDoor:
    """Each OpenAI-compatible door in turn (llama.cpp skipped without llama-server)."""
    if request.param == "openai":
        return lmstudio_door
    if isinstance(llamacpp_door, str):
        pytest.skip(llamacpp_door)
    return llamacpp_door


# Transport


async def test_c05_json_answers_are_json(door: OpenAIDoor) -> None:
    async with door.client() as client:
        listed = await client.get("/v1/models")
        completed = await client.post("/v1/chat/completions", json=door.chat())
    for response in (listed, completed):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")


async def test_c06_cors_preflight_from_localhost_3000_is_allowed(door: OpenAIDoor) -> None:
    async with door.client() as client:
        await check_cors_preflight(
            client,
            "/v1/chat/completions",
            door.chat(),
            ["authorization", "content-type", "x-stainless-os", "x-stainless-retry-count"],
        )


@pytest.mark.parametrize("authorization", [None, "Bearer anything-at-all"])
async def test_c07_c85_authorization_is_optional_and_any_bearer_is_accepted(
    door: OpenAIDoor, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with door.client() as client:
        response = await client.post("/v1/chat/completions", json=door.chat(), headers=headers)
    assert response.status_code == 200
    async with door.openai() as client:
        completion = await client.chat.completions.create(
            model=door.chat_model, messages=MESSAGES, max_tokens=8
        )
    assert completion.choices[0].message.role == "assistant"


# OpenAI /v1 layer


async def test_c65_models_list_has_the_openai_shape(
    door: OpenAIDoor, request: pytest.FixtureRequest
) -> None:
    expect_failure_on(
        request,
        door,
        "openai",
        "the door passes LM Studio's /v1/models entries through byte for byte and LM Studio "
        "omits `created` (engine-apis.md §4.2), so the entries lack it",
    )
    async with door.client() as client:
        listed = (await client.get("/v1/models")).json()
    assert listed["object"] == "list"
    assert door.chat_model in [entry["id"] for entry in listed["data"]]
    for entry in listed["data"]:
        assert entry["object"] == "model"
        assert type(entry["created"]) is int
        assert isinstance(entry["owned_by"], str)


async def test_c65_openai_client_lists_the_models(door: OpenAIDoor) -> None:
    async with door.openai() as client:
        listed = await client.models.list()
    assert door.chat_model in [model.id for model in listed.data]


async def test_c66_retrieve_a_known_model(door: OpenAIDoor) -> None:
    # Neither LM Studio nor llama-server has GET /v1/models/{id}: the door answers it from
    # the federated /v1/models list.
    async with door.client() as client:
        response = await client.get(f"/v1/models/{door.chat_model}")
    assert response.status_code == 200
    retrieved = response.json()
    assert (retrieved["id"], retrieved["object"]) == (door.chat_model, "model")


async def test_c66_retrieve_an_unknown_model_is_404(door: OpenAIDoor) -> None:
    async with door.openai() as client:
        with pytest.raises(openai.NotFoundError) as refused:
            await client.models.retrieve("no-such-model")
    error = refused.value.body
    assert isinstance(error, dict) and isinstance(error["message"], str)


async def test_c67_without_stream_the_answer_is_one_chat_completion(door: OpenAIDoor) -> None:
    async with door.client() as client:
        response = await client.post("/v1/chat/completions", json=door.chat())
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["object"] == "chat.completion"


async def test_c68_chat_completion_has_the_documented_fields(door: OpenAIDoor) -> None:
    async with door.client() as client:
        completion = (await client.post("/v1/chat/completions", json=door.chat())).json()
    assert isinstance(completion["id"], str) and completion["id"]
    assert completion["object"] == "chat.completion"
    assert type(completion["created"]) is int
    assert isinstance(completion["model"], str)
    choice = completion["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_c69_stream_is_server_sent_events(door: OpenAIDoor) -> None:
    response, chunks = await stream_chunks(door)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert len(chunks) >= 2


async def test_c70_chunks_share_id_and_created(door: OpenAIDoor) -> None:
    began = time.time()
    _, chunks = await stream_chunks(door)
    ended = time.time()
    assert len({chunk["id"] for chunk in chunks}) == 1
    created = [chunk["created"] for chunk in chunks]
    if door.name == "llamacpp":
        # llama-server stamps each chunk with the second it sends it in, so a stream that
        # crosses second boundaries (a slow one on a loaded machine, several) carries several
        # values; the proxy passes them through untouched, in order.
        assert created == sorted(created)
        assert math.floor(began) <= created[0] and created[-1] <= math.ceil(ended)
    else:
        assert len(set(created)) == 1
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}


async def test_c71_first_delta_is_the_assistant_role(door: OpenAIDoor) -> None:
    # Greedy and seeded: llama-server names the role only in the chunk of the first decoded
    # token, and a random tiny model may start with a partial UTF-8 sequence it holds back, so
    # its first chunk would come later and carry no role.
    _, chunks = await stream_chunks(door, temperature=0, seed=7)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"


@pytest.mark.parametrize("with_usage", [False, True])
async def test_c72_exactly_one_finish_reason_before_done(
    door: OpenAIDoor, with_usage: bool
) -> None:
    fields = {"stream_options": {"include_usage": True}} if with_usage else {}
    _, chunks = await stream_chunks(door, **fields)
    reasons = [
        (index, choice["finish_reason"])
        for index, chunk in enumerate(chunks)
        for choice in chunk["choices"]
        if choice.get("finish_reason") is not None
    ]
    assert len(reasons) == 1
    assert reasons[0][1] in ("stop", "length")
    assert reasons[0][0] == len(chunks) - (2 if with_usage else 1)


async def test_c73_stream_ends_with_done_and_closes(door: OpenAIDoor) -> None:
    async with door.client() as client:
        response = await client.post("/v1/chat/completions", json=door.chat(stream=True))
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert response.content.count(b"[DONE]") == 1
    assert response.is_closed


async def test_c74_include_usage_adds_a_usage_chunk_before_done(door: OpenAIDoor) -> None:
    _, chunks = await stream_chunks(door, stream_options={"include_usage": True})
    last = chunks[-1]
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert all(chunk.get("usage") is None for chunk in chunks[:-1])


async def test_c75_without_include_usage_no_chunk_carries_usage(door: OpenAIDoor) -> None:
    _, chunks = await stream_chunks(door)
    assert all(chunk.get("usage") is None for chunk in chunks)


async def test_c79_unknown_model_raises_not_found(door: OpenAIDoor) -> None:
    async with door.openai() as client:
        with pytest.raises(openai.NotFoundError) as refused:
            await client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert refused.value.status_code == 404


async def test_c80_empty_messages_are_400(lmstudio_door: OpenAIDoor) -> None:
    # llama-server accepts empty messages (it generates from the bare template), so only the
    # LM Studio door is held to this item.
    async with lmstudio_door.openai() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model=CHAT_MODEL, messages=[])
    assert refused.value.status_code == 400


@pytest.mark.parametrize("stream", [False, True])
async def test_c83_completions_are_text_completions(door: OpenAIDoor, stream: bool) -> None:
    body = {"model": door.chat_model, "prompt": "Once upon a time", "max_tokens": 8}
    async with door.client() as client:
        response = await client.post("/v1/completions", json={**body, "stream": stream})
    if not stream:
        completion = response.json()
        assert completion["object"] == "text_completion"
        assert isinstance(completion["choices"][0]["text"], str)
        return
    events = sse_events(response.content)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"text_completion"}


@pytest.mark.parametrize(
    "payload",
    [{"input": "hello"}, {"input": ["hello", "world"]}, {"input": ["a", "b"], "b64": True}],
    ids=["string", "list", "base64"],
)
async def test_c84_embeddings_return_vectors_by_index(
    door: OpenAIDoor, payload: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    wants_base64 = payload.pop("b64", False)
    if wants_base64:
        expect_failure_on(
            request,
            door,
            "openai",
            "LM Studio (and its emulator) ignore encoding_format and send floats; the door "
            "passes them through instead of encoding them as base64",
        )
        payload = {**payload, "encoding_format": "base64"}
    async with door.client() as client:
        response = await client.post(
            "/v1/embeddings", json={"model": door.embedding_model, **payload}
        )
    data = response.json()["data"]
    inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
    assert [item["index"] for item in data] == list(range(len(inputs)))
    for item in data:
        if wants_base64:
            assert isinstance(item["embedding"], str)
            assert len(base64.b64decode(item["embedding"])) % 4 == 0
        else:
            assert item["embedding"] and all(isinstance(x, float) for x in item["embedding"])


async def test_c84_openai_client_embeds(door: OpenAIDoor) -> None:
    async with door.openai() as client:
        embedded = await client.embeddings.create(
            model=door.embedding_model, input=["hello", "world"]
        )
    assert [item.index for item in embedded.data] == [0, 1]
    assert all(len(item.embedding) > 1 for item in embedded.data)


# Errors


@pytest.mark.parametrize(
    ("body", "status", "error_type", "reason"),
    [
        (
            b'{"model": "qwen2.5-7b-instruct", "messages": [',
            400,
            "invalid_request_error",
            "",
        ),
        (
            b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "not_found_error",
            "",
        ),
        (
            b'{"model": "qwen2.5-7b-instruct", "messages": []}',
            400,
            "invalid_request_error",
            "",  # LM Studio's flat string error, reshaped by the door
        ),
    ],
    ids=["door-400", "door-404", "engine-400"],
)
async def test_c78_errors_are_openai_error_objects(
    lmstudio_door: OpenAIDoor,
    body: bytes,
    status: int,
    error_type: str,
    reason: str,
    request: pytest.FixtureRequest,
) -> None:
    if reason:  # a known gap, named in the parameters
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    async with lmstudio_door.client() as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert isinstance(error, dict) and set(error) >= {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["type"] == error_type


async def test_c81_mid_stream_error_reaches_the_client_without_done() -> None:
    engine = EmulatorServer(mid_stream_failure_app())
    await engine.start()
    try:
        async with serving_proxy(lmstudio=local(engine.url, ["faulty"])) as proxy:
            failing = OpenAIDoor("openai", proxy, engine.url, "faulty", "faulty")
            async with failing.client() as client:
                raw = await client.post("/v1/chat/completions", json=failing.chat(stream=True))
            async with failing.openai() as client:
                stream = await client.chat.completions.create(
                    model="faulty", messages=MESSAGES, stream=True
                )
                with pytest.raises(openai.APIError, match="the engine crashed"):
                    async for _ in stream:
                        pass
    finally:
        await engine.stop()
    assert b"[DONE]" not in raw.content
    assert json.loads(sse_events(raw.content)[-1])["error"]["message"] == "the engine crashed"


@pytest.mark.parametrize("call", ["models.retrieve", "chat.completions.create"])
async def test_c86_openai_client_sees_404_for_a_model_no_engine_has_on_any_door(
    lmstudio_door: OpenAIDoor, call: str
) -> None:
    # The LM Studio proxy runs no llama-server: its llama.cpp door has no engine of its own,
    # yet it serves every model of the cluster, and one nobody has is not found (never a 503
    # about a missing engine, which clients would retry).
    empty = openai.AsyncOpenAI(
        base_url=lmstudio_door.proxy.url("llamacpp") + "/v1", api_key="x", max_retries=0
    )
    async with empty as client:
        ask = (
            client.models.retrieve(LLAMA_ALIAS)
            if call == "models.retrieve"
            else client.chat.completions.create(model=LLAMA_ALIAS, messages=MESSAGES)
        )
        with pytest.raises(openai.NotFoundError):
            await ask


# Streaming latency and cancellation


async def test_c24_first_event_arrives_long_before_generation_finishes(
    slow_lmstudio_door: OpenAIDoor,
) -> None:
    tokens = 8
    arrivals: list[float] = []
    body = slow_lmstudio_door.chat(stream=True, max_tokens=tokens)
    async with (
        slow_lmstudio_door.client() as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                arrivals.append(time.perf_counter())
    assert len(arrivals) == tokens
    # The emulator spends (tokens - 1) token delays between the first and the last token; a
    # proxy that buffered the body would deliver every event at once.
    assert arrivals[-1] - arrivals[0] >= (tokens - 1) * SLOW_TOKEN_DELAY / 2


async def test_c60_client_disconnect_stops_upstream_generation(
    slow_lmstudio_door: OpenAIDoor,
) -> None:
    before = (await slow_lmstudio_door.engine_state())["cancelled"]
    body = slow_lmstudio_door.chat(stream=True, max_tokens=-1)
    async with (
        slow_lmstudio_door.client() as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        async for line in response.aiter_lines():
            assert line.startswith("data: {")
            break
    # 400 tokens take 20 s; the engine must see the cancel after a few token delays.
    async with asyncio.timeout(40 * SLOW_TOKEN_DELAY):
        while (state := await slow_lmstudio_door.engine_state())["cancelled"] == before:
            await asyncio.sleep(SLOW_TOKEN_DELAY / 2)
    cancelled = [record for record in state["finished"] if record["state"] == "cancelled"]
    assert cancelled[-1]["tokens"] < 400


# Bad inputs at the door


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "x", "messages": [{"role": "user", "content": "hi',
        b'{"model": 42, "messages": []}',
        b'{"model": ["x"], "messages": []}',
        b'{"model": null, "messages": []}',
        b"[]",
    ],
    ids=["truncated", "model-int", "model-list", "model-null", "array"],
)
async def test_door_answers_malformed_bodies_with_an_openai_400(
    door: OpenAIDoor, body: bytes
) -> None:
    async with door.client() as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["type"] == "invalid_request_error"


async def test_door_refuses_a_40_mib_body_with_413(door: OpenAIDoor) -> None:
    content = "x" * (40 * 1024 * 1024)
    body = json.dumps(door.chat(messages=[{"role": "user", "content": content}])).encode()
    async with door.client(timeout=30) as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == 413
    assert isinstance(response.json()["error"]["message"], str)


async def test_door_refuses_a_rebinding_host_with_403_json(door: OpenAIDoor) -> None:
    async with door.client() as client:
        response = await client.post(
            "/v1/chat/completions", json=door.chat(), headers={"Host": "evil.example:11434"}
        )
    assert response.status_code == 403
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json()["error"]["message"], str)
    async with door.openai(default_headers={"Host": "evil.example:11434"}) as client:
        with pytest.raises(openai.PermissionDeniedError):
            await client.models.list()
