"""The llama.cpp front door in front of a real llama-server, driven by the ``openai`` client."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from tests.integration.proxy.conftest import RunningProxy, StartProxy, local

if TYPE_CHECKING:
    from tests.engines.fixtures import LlamaServer, StartLlamaServer

pytest_plugins = ["tests.engines.fixtures"]


async def _proxy_for(start_proxy: StartProxy, server: LlamaServer) -> tuple[RunningProxy, str]:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
    target = local(server.base_url, [model])
    return await start_proxy(llamacpp=target), model


def _client(proxy: RunningProxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url("llamacpp") + "/v1", api_key="unused")


async def _busy(engine: httpx.AsyncClient) -> bool:
    """Whether any llama-server slot is processing (one kept-alive connection for every poll)."""
    return any(slot["is_processing"] for slot in (await engine.get("/slots")).json())


async def test_openai_client_chats_and_lists_models_through_the_front_door(
    start_proxy: StartProxy, start_llama_server: StartLlamaServer, tiny_model_path: Any
) -> None:
    proxy, model = await _proxy_for(start_proxy, start_llama_server(tiny_model_path))
    async with _client(proxy) as client:
        listed = await client.models.list()
        assert [entry.id for entry in listed.data] == [model]
        messages: Any = [{"role": "user", "content": "hello"}]
        whole = await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
        assert whole.choices[0].message.content is not None
        stream = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=8, stream=True
        )
        chunks = [chunk async for chunk in stream]
        assert len(chunks) > 2
        assert chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason is not None
        with pytest.raises(openai.NotFoundError) as refused:
            await client.chat.completions.create(model="nope", messages=messages)
        assert refused.value.code == "model_not_found"


async def test_client_disconnect_mid_stream_frees_the_engine_slot(
    start_proxy: StartProxy, start_llama_server: StartLlamaServer, busy_model_path: Any
) -> None:
    # Spare HTTP threads: with few cores the stream alone could hold the only one, hiding /slots.
    server = start_llama_server(
        busy_model_path, parallel=1, context=4096, extra_args=("--threads-http", "8")
    )
    proxy, model = await _proxy_for(start_proxy, server)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        # Some 40 s of generation on an idle machine (longer loaded): far more than the bounds
        # below, so a slot the proxy did not free cannot come free on its own within them.
        "max_tokens": 3500,
        "ignore_eos": True,  # llama-server extension: a random model must not stop early
        "stream": True,
    }
    async with (
        httpx.AsyncClient(base_url=server.base_url, timeout=10) as engine,
        httpx.AsyncClient(base_url=proxy.url("llamacpp"), timeout=30) as client,
    ):
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for _ in response.aiter_raw():
                break
            # /slots can lag the first token (by seconds on a loaded machine).
            async with asyncio.timeout(15):
                while not await _busy(engine):
                    await asyncio.sleep(0.05)
        # The stream is closed: the proxy must drop the upstream request, freeing the slot. The
        # proxy does so at once; llama-server notices between tokens, which took over 5 s with
        # the machine loaded by three other test processes.
        async with asyncio.timeout(10):
            while await _busy(engine):
                await asyncio.sleep(0.05)


async def test_client_connecting_while_the_worker_restarts_is_served(
    start_proxy: StartProxy, start_llama_server: StartLlamaServer, tiny_model_path: Any
) -> None:
    proxy, model = await _proxy_for(start_proxy, start_llama_server(tiny_model_path))
    old_pid = await proxy.wait_serving()
    os.kill(old_pid, signal.SIGKILL)
    async with asyncio.timeout(5):
        while proxy.component.pid() is not None:
            await asyncio.sleep(0.01)
    # No worker runs now: the connection waits in the broker-held socket's backlog.
    async with _client(proxy) as client:
        listed = await client.models.list()
    assert [entry.id for entry in listed.data] == [model]
    assert await proxy.wait_serving() != old_pid


async def test_anthropic_messages_pass_through_to_llama_server_and_become_jobs(
    start_proxy: StartProxy, start_llama_server: StartLlamaServer, tiny_model_path: Any
) -> None:
    proxy, model = await _proxy_for(start_proxy, start_llama_server(tiny_model_path))
    request = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=proxy.url("llamacpp"), timeout=60) as client:
        whole = await client.post("/v1/messages", json=request)
        assert whole.status_code == 200 and whole.json()["type"] == "message"
        streamed = await client.post("/v1/messages", json={**request, "stream": True})
        assert streamed.status_code == 200 and b"message_stop" in streamed.content
        unknown = await client.post("/v1/messages", json={**request, "model": "nope"})
        assert unknown.status_code == 404
        assert unknown.json()["type"] == "error"  # Anthropic's error shape
        assert unknown.json()["error"]["type"] == "not_found_error"
    for _ in range(100):
        if sum(e["kind"] == "completed" for e in proxy.jobs) == 2:
            break
        await asyncio.sleep(0.05)
    completed = [e for e in proxy.jobs if e["kind"] == "completed"]
    assert [e["path"] for e in completed] == ["/v1/messages", "/v1/messages"]
