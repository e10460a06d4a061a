"""Every inference answer of a real proxy worker names the node that served it and its job.

``X-PAIR-Served-By`` carries the serving node's id and ``X-PAIR-Job`` the job's key, on a
streamed OpenAI answer, on an Anthropic answer translated whole for the engine, on an engine's
error, and on an answer a member served over the relay (the member is named, not this node).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import LOCAL_NODE, RunningProxy, StartProxy, credentials_for

NODE_B = "node-b"
SERVED_BY = "X-PAIR-Served-By"
JOB = "X-PAIR-Job"


async def _post(url: str, body: dict[str, Any], **headers: str) -> tuple[int, Any, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=30)
        ) as response,
    ):
        return response.status, response.headers, await response.read()


def _openai(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _one_node(start_proxy: StartProxy, engine_url: str) -> RunningProxy:
    target = RouteTarget(node_id=LOCAL_NODE, kind="local", base_url=engine_url, models=["llama3.2"])
    proxy = await start_proxy(ollama=target)
    await proxy.wait_table()
    return proxy


async def test_a_streamed_answer_names_this_node_and_its_job(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _one_node(start_proxy, ollama_emulator)
    url = proxy.url("ollama") + "/v1/chat/completions"
    status, headers, body = await _post(url, _openai("llama3.2"))
    assert status == 200 and b"data: [DONE]" in body
    assert headers[SERVED_BY] == LOCAL_NODE
    assert headers[JOB] == (await proxy.wait_keys(1))[0]


async def test_a_translated_whole_answer_and_an_engine_error_name_the_node_too(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await _one_node(start_proxy, ollama_emulator)
    messages = {
        "model": "llama3.2",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
    }
    url = proxy.url("ollama") + "/v1/messages"
    status, headers, _ = await _post(url, messages, **{"anthropic-version": "2023-06-01"})
    assert status == 200 and headers[SERVED_BY] == LOCAL_NODE and headers[JOB]
    # A request the engine refuses (no messages at all) still names who refused it.
    status, headers, _ = await _post(
        proxy.url("ollama") + "/api/chat", {"model": "llama3.2", "messages": "not a list"}
    )
    assert status >= 400 and headers[SERVED_BY] == LOCAL_NODE


async def test_an_answer_relayed_from_a_member_names_the_member(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    b = await start_proxy(node_id=NODE_B)
    b.targets = ProxyTargets(
        node_id=NODE_B,
        engines={
            "ollama": [
                RouteTarget(
                    node_id=NODE_B, kind="local", base_url=ollama_emulator, models=["llama3.2"]
                )
            ]
        },
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    a = await start_proxy()
    a.targets = ProxyTargets(
        node_id=LOCAL_NODE, engines={"ollama": [b.as_peer(NODE_B, ["llama3.2"])]}
    )
    await b.wait_table()
    await a.wait_table()
    status, headers, body = await _post(
        a.url("ollama") + "/v1/chat/completions", _openai("llama3.2")
    )
    assert status == 200, body
    assert headers[SERVED_BY] == NODE_B
    assert headers[JOB] == (await a.wait_keys(1))[0]  # this node's job, not the member's
