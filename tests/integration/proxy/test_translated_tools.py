"""Tool calls, images and a cut stream through a translation, with the official clients.

The engine is a scripted OpenAI one (``openai_script.py``), since the tiny model's random
weights call no tools: it answers with a tool call, or cuts its stream. Listed as llama-server it
gets Ollama's API translated; listed as LM Studio, Anthropic's. Two proxies stand in for two
paired members (real mutual TLS between them): the member's relay translates for its engine.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import ollama
import pytest

from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    RunningProxy,
    StartProxy,
    credentials_for,
    local,
)
from tests.integration.proxy.openai_script import MODEL, WORDS, OpenAiScript

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ANTHROPIC_TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
HELLO: Any = [{"role": "user", "content": "hello"}]
NODE_B = "node-b"


@pytest.fixture
async def script() -> AsyncIterator[OpenAiScript]:
    engine = await OpenAiScript().start()
    yield engine
    await engine.stop()


async def test_the_ollama_client_gets_tool_calls_from_an_openai_engine(
    start_proxy: StartProxy, script: OpenAiScript
) -> None:
    script.reply = "tool"
    proxy = await start_proxy(llamacpp=local(script.url, [MODEL]))
    client = ollama.AsyncClient(host=proxy.url("ollama"))
    asked: Any = [{"role": "user", "content": "weather?", "images": [PNG]}]
    whole = await client.chat(model=MODEL, messages=asked, tools=[WEATHER_TOOL])
    calls = whole.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    sent = script.received[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    image = sent["messages"][0]["content"][1]
    assert image["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    streamed = [
        part async for part in await client.chat(MODEL, asked, tools=[WEATHER_TOOL], stream=True)
    ]
    called = [c for part in streamed for c in part.message.tool_calls or []]
    assert [dict(c.function.arguments) for c in called] == [{"city": "Paris"}]
    assert streamed[-1].done
    # The tool's result goes back as the engine's tool message, tied to the call.
    history: Any = [
        *asked,
        {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    script.reply = "text"
    answer = await client.chat(model=MODEL, messages=history)
    assert answer.message.content == "".join(WORDS)
    tool_message = script.received[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "sunny"
    assert (
        tool_message["tool_call_id"] == script.received[-1]["messages"][-2]["tool_calls"][0]["id"]
    )


async def test_the_anthropic_client_gets_tool_use_from_an_engine_without_messages(
    start_proxy: StartProxy, script: OpenAiScript
) -> None:
    script.reply = "tool"
    proxy = await start_proxy(lmstudio=local(script.url, [MODEL]))
    client = anthropic.AsyncAnthropic(base_url=proxy.url("llamacpp"), api_key="x")
    whole = await client.messages.create(
        model=MODEL, max_tokens=50, messages=HELLO, tools=[ANTHROPIC_TOOL]
    )
    assert whole.stop_reason == "tool_use"
    uses = [block for block in whole.content if block.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris"})]
    async with client.messages.stream(
        model=MODEL, max_tokens=50, messages=HELLO, tools=[ANTHROPIC_TOOL]
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}]
    assert final.usage.output_tokens == 4
    await client.close()


async def test_a_cut_stream_ends_in_the_clients_own_error_never_a_clean_end(
    start_proxy: StartProxy, script: OpenAiScript
) -> None:
    script.reply = "cut"
    proxy = await start_proxy(llamacpp=local(script.url, [MODEL]))
    client = ollama.AsyncClient(host=proxy.url("ollama"))
    seen: list[Any] = []

    async def read_all() -> None:
        async for part in await client.chat(model=MODEL, messages=HELLO, stream=True):
            seen.append(part)

    with pytest.raises(ollama.ResponseError):
        await read_all()
    assert seen and not any(part.done for part in seen), "no final record after a cut"
    messages = anthropic.AsyncAnthropic(base_url=proxy.url("ollama"), api_key="x")
    with pytest.raises(anthropic.APIError):
        async with messages.messages.stream(model=MODEL, max_tokens=5, messages=HELLO) as stream:
            await stream.get_final_message()
    await messages.close()


async def _member(start_proxy: StartProxy, engine_url: str) -> RouteTarget:
    """Node B, running the scripted engine as llama-server and trusting this node."""
    b: RunningProxy = await start_proxy(node_id=NODE_B)
    b.targets = ProxyTargets(
        node_id=NODE_B,
        engines={
            "llamacpp": [
                RouteTarget(node_id=NODE_B, kind="local", base_url=engine_url, models=[MODEL])
            ]
        },
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    await b.wait_table()
    return b.as_peer(NODE_B, [MODEL])


async def test_a_paired_members_relay_translates_for_its_own_engine(
    start_proxy: StartProxy, script: OpenAiScript
) -> None:
    peer = await _member(start_proxy, script.url)
    a = await start_proxy()
    a.targets = ProxyTargets(node_id=LOCAL_NODE, engines={"llamacpp": [peer]})
    await a.wait_table()
    client = ollama.AsyncClient(host=a.url("ollama"))
    tags = await client.list()
    assert [entry.model for entry in tags.models] == [MODEL]
    whole = await client.chat(model=MODEL, messages=HELLO)
    assert whole.message.content == "".join(WORDS) and whole.done_reason == "stop"
    parts = [part async for part in await client.chat(MODEL, HELLO, stream=True)]
    assert "".join(p.message.content or "" for p in parts) == "".join(WORDS) and parts[-1].done
    assert script.received[-1]["stream"] is True  # the member sent OpenAI's request
    assert "messages" in script.received[-1]
    served = [e for e in a.events() if e.get("kind") == "completed"]
    assert served and all(e["engine"] == "llamacpp" for e in served)
