"""The Ollama front door in front of the Ollama emulator, driven by the official client."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import ollama
import pytest

from backend.components.proxy.listeners import listen_tcp
from tests.integration.proxy.conftest import RunningProxy, StartProxy, free_ports, local

# The proxy is told only about llama3.2, so qwen2.5 (installed on the emulator) is unknown to it.
KNOWN = ["llama3.2:latest"]


async def _proxy(start_proxy: StartProxy, emulator_url: str) -> RunningProxy:
    return await start_proxy(ollama=local(emulator_url, KNOWN))


async def _state(emulator_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=emulator_url) as client:
        response = await client.get("/_emulator/state")
        return response.json()  # type: ignore[no-any-return]


async def test_ollama_client_chats_and_generates_through_the_front_door(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _proxy(start_proxy, ollama_emulator)
    client = ollama.Client(host=proxy.url("ollama"))
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    whole = await asyncio.to_thread(client.chat, "llama3.2", messages=messages)
    streamed = await asyncio.to_thread(
        lambda: [
            part.message.content or "" for part in client.chat("llama3.2", messages, stream=True)
        ]
    )
    assert whole.message.content and "".join(streamed) == whole.message.content
    assert len(streamed) > 2
    generated = await asyncio.to_thread(client.generate, "llama3.2", "hi")
    assert generated.done and generated.response
    pieces = await asyncio.to_thread(lambda: list(client.generate("llama3.2", "hi", stream=True)))
    assert pieces[-1].done and "".join(p.response or "" for p in pieces) == generated.response
    listed = await asyncio.to_thread(client.list)
    assert [model.model for model in listed.models] == ["llama3.2:latest", "qwen2.5:latest"]


async def test_unknown_model_is_answered_without_contacting_the_engine(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _proxy(start_proxy, ollama_emulator)
    client = ollama.Client(host=proxy.url("ollama"))
    with pytest.raises(ollama.ResponseError) as error:
        await asyncio.to_thread(client.generate, "qwen2.5", "hi")
    assert error.value.status_code == 404
    assert error.value.error == "model 'qwen2.5' not found"
    state = await _state(ollama_emulator)
    assert (state["completed"], state["failed"], state["finished"]) == (0, 0, [])


async def test_every_answer_carries_the_proxy_time_header(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _proxy(start_proxy, ollama_emulator)
    async with httpx.AsyncClient(base_url=proxy.url("ollama")) as client:
        forwarded = await client.post("/api/generate", json={"model": "llama3.2", "prompt": "x"})
        local = await client.post("/api/generate", json={"model": "nope"})
        version = await client.get("/api/version")
    for response in (forwarded, local, version):
        assert float(response.headers["X-PAIR-Proxy-Ms"]) >= 0.0
    assert (forwarded.status_code, local.status_code, version.status_code) == (200, 404, 200)
    assert "access-control-allow-origin" not in forwarded.headers


async def test_oversized_body_is_refused_with_413(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _proxy(start_proxy, ollama_emulator)
    body = b'{"model": "llama3.2", "prompt": "' + b"x" * (40 * 1024 * 1024) + b'"}'
    async with httpx.AsyncClient(base_url=proxy.url("ollama"), timeout=30) as client:
        response = await client.post("/api/generate", content=body)
    assert response.status_code == 413
    assert "32 MiB" in response.json()["error"]


async def test_rebinding_host_and_foreign_origin_are_refused(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _proxy(start_proxy, ollama_emulator)
    async with httpx.AsyncClient(base_url=proxy.url("ollama")) as client:
        rebound = await client.get("/api/tags", headers={"Host": "attacker.example:11434"})
        foreign = await client.get("/api/tags", headers={"Origin": "https://evil.example"})
        local = await client.get("/api/tags", headers={"Origin": "http://localhost:3000"})
    assert rebound.status_code == 403 and "Host" in rebound.json()["error"]
    assert foreign.status_code == 403
    assert local.status_code == 200
    assert local.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert (await _state(ollama_emulator))["finished"] == []


async def test_a_taken_port_moves_the_door_and_raises_a_warning_with_the_real_url(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    with listen_tcp("127.0.0.1", 0) as other_program:
        taken = int(other_program.getsockname()[1])
        ports = free_ports()
        proxy = await start_proxy(
            msgspec.structs.replace(ports, ollama=taken),
            ollama=local(ollama_emulator, KNOWN),
        )
        real_url = proxy.url("ollama")
        assert real_url != f"http://127.0.0.1:{taken}"
        assert real_url in proxy.errors.open["proxy:port-taken:ollama"]
        assert "proxy:port-taken:openai" not in proxy.errors.open
        listed = await asyncio.to_thread(ollama.Client(host=real_url).list)
        assert len(listed.models) == 2
