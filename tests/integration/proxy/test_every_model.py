"""One door, every model: the official ``ollama``, ``openai`` and ``anthropic`` clients reach
every model of every engine through every front door.

This node runs a real llama-server (the tiny model, started with ``--embeddings`` as PAIR starts
it), the Ollama emulator and the LM Studio emulator (both stand in for the real engines, per
docs/engine-apis.md). Where the engine speaks the client's API the request passes through;
otherwise it is translated (Ollama's API to llama-server and LM Studio; Anthropic's Messages to
Ollama and LM Studio) and the answer translated back, streamed or not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anthropic
import httpx
import ollama
import openai
import pytest

from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.lmstudio import build_lmstudio_app
from backend.devtools.emulators.lmstudio_state import LmStudioConfig
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import RunningProxy, StartProxy, local
from tests.support.ports import refusing_port

if TYPE_CHECKING:
    from tests.engines.fixtures import StartLlamaServer

pytest_plugins = ["tests.engines.fixtures"]

OLLAMA_MODEL = "llama3.2:latest"
LMSTUDIO_MODEL = "qwen2.5-7b-instruct"
DOORS = ("ollama", "openai", "llamacpp")
HELLO: Any = [{"role": "user", "content": "hello"}]
# PAIR starts llama-server so: embeddings work next to chat (backend/components/engines).
EMBEDDINGS = ("--embeddings", "--pooling", "last")


@pytest.fixture
async def cluster(
    start_proxy: StartProxy, start_llama_server: StartLlamaServer, tiny_model_path: Any
) -> AsyncIterator[tuple[RunningProxy, str]]:
    """A node running all three engines; its proxy and llama-server's model name."""
    server = start_llama_server(tiny_model_path, extra_args=EMBEDDINGS)
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        tiny = (await client.get("/v1/models")).json()["data"][0]["id"]
    timing = TimingModel(load_delay=0.01, token_delay=0.002)
    emulated_ollama = EmulatorServer(
        build_ollama_app(OllamaConfig(models=("llama3.2",), timing=timing))
    )
    emulated_lmstudio = EmulatorServer(
        build_lmstudio_app(LmStudioConfig(models=(LMSTUDIO_MODEL,), timing=timing))
    )
    await emulated_ollama.start()
    await emulated_lmstudio.start()
    try:
        proxy = await start_proxy(
            llamacpp=local(server.base_url, [tiny]),
            ollama=local(emulated_ollama.url, [OLLAMA_MODEL]),
            lmstudio=local(emulated_lmstudio.url, [LMSTUDIO_MODEL]),
        )
        yield proxy, tiny
    finally:
        await emulated_ollama.stop()
        await emulated_lmstudio.stop()


async def test_every_door_lists_every_engines_models_to_every_client(
    cluster: tuple[RunningProxy, str],
) -> None:
    proxy, tiny = cluster
    everything = {tiny, OLLAMA_MODEL, LMSTUDIO_MODEL}
    for door in DOORS:
        tags = await ollama.AsyncClient(host=proxy.url(door)).list()
        assert {entry.model for entry in tags.models} == everything, door
        async with openai.AsyncOpenAI(base_url=proxy.url(door) + "/v1", api_key="x") as client:
            listed = await client.models.list()
            assert {entry.id for entry in listed.data} == everything, door
    shown = await ollama.AsyncClient(host=proxy.url("ollama")).show(tiny)
    assert shown.details is not None and shown.details.family == "llama"
    assert shown.capabilities is not None and "completion" in shown.capabilities


async def test_the_ollama_client_chats_generates_and_embeds_with_llama_servers_model(
    cluster: tuple[RunningProxy, str],
) -> None:
    proxy, tiny = cluster
    client = ollama.AsyncClient(host=proxy.url("ollama"))
    options = {"num_predict": 6, "temperature": 0, "seed": 1}
    whole = await client.chat(model=tiny, messages=HELLO, options=options)
    assert whole.done and whole.done_reason in ("stop", "length")
    assert whole.model == tiny and isinstance(whole.message.content, str)
    assert whole.eval_count and whole.prompt_eval_count
    parts = [part async for part in await client.chat(tiny, HELLO, stream=True, options=options)]
    assert parts[-1].done and not any(part.done for part in parts[:-1])
    assert "".join(part.message.content or "" for part in parts) == whole.message.content
    loaded = await client.generate(model=tiny)  # what ``ollama run`` sends first
    assert loaded.done and loaded.done_reason == "load"
    generated = await client.generate(model=tiny, prompt="hello", options=options)
    assert generated.done and isinstance(generated.response, str)
    as_json = await client.chat(tiny, HELLO, format="json", options={"num_predict": 4})
    assert as_json.done
    embedded = await client.embed(model=tiny, input=["one", "two"])
    assert len(embedded.embeddings) == 2 and len(embedded.embeddings[0]) > 8
    legacy = await client.embeddings(model=tiny, prompt="one")
    assert len(legacy.embedding) == len(embedded.embeddings[0])
    with pytest.raises(ollama.ResponseError) as unknown:
        await client.chat(model="no-such-model", messages=HELLO)
    assert unknown.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as refused:
        await client.chat(model=tiny, messages=HELLO, options={"tfs_z": 0.5})
    assert refused.value.status_code == 400 and "options.tfs_z" in refused.value.error
    async with httpx.AsyncClient(base_url=proxy.url("ollama")) as raw:
        body = {"model": tiny, "messages": HELLO, "stream": False, "keep_alive": "1h"}
        body["options"] = {"num_ctx": 8192, "num_predict": 2}
        answered = await raw.post("/api/chat", json=body)
    assert answered.status_code == 200
    assert answered.headers["X-PAIR-Ignored"] == "options.num_ctx, keep_alive"


async def test_the_openai_client_reaches_every_engines_model_from_every_door(
    cluster: tuple[RunningProxy, str],
) -> None:
    proxy, tiny = cluster
    for door, model in (("llamacpp", OLLAMA_MODEL), ("openai", tiny), ("ollama", LMSTUDIO_MODEL)):
        async with openai.AsyncOpenAI(base_url=proxy.url(door) + "/v1", api_key="x") as client:
            whole = await client.chat.completions.create(model=model, messages=HELLO, max_tokens=5)
            assert whole.choices[0].message.content is not None, (door, model)
            stream = await client.chat.completions.create(
                model=model, messages=HELLO, max_tokens=5, stream=True
            )
            assert [chunk async for chunk in stream], (door, model)
    async with openai.AsyncOpenAI(base_url=proxy.url("openai") + "/v1", api_key="x") as client:
        vectors = await client.embeddings.create(model=tiny, input="hello")
        assert len(vectors.data[0].embedding) > 8
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="no-such-model", messages=HELLO)


async def test_the_anthropic_client_is_served_natively_by_llama_server_and_translated_elsewhere(
    cluster: tuple[RunningProxy, str],
) -> None:
    proxy, tiny = cluster
    for door, model in (("llamacpp", tiny), ("ollama", LMSTUDIO_MODEL), ("openai", OLLAMA_MODEL)):
        client = anthropic.AsyncAnthropic(base_url=proxy.url(door), api_key="x")
        whole = await client.messages.create(
            model=model, max_tokens=5, messages=HELLO, system="Be brief."
        )
        assert whole.role == "assistant" and whole.model == model, (door, model)
        assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.output_tokens > 0
        async with client.messages.stream(model=model, max_tokens=5, messages=HELLO) as stream:
            final = await stream.get_final_message()
        assert final.stop_reason in ("end_turn", "max_tokens"), (door, model)
        await client.close()
    client = anthropic.AsyncAnthropic(base_url=proxy.url("ollama"), api_key="x")
    counted = await client.messages.count_tokens(model=tiny, messages=HELLO)
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.BadRequestError, match="cannot count tokens"):
        await client.messages.count_tokens(model=OLLAMA_MODEL, messages=HELLO)
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="no-such-model", max_tokens=5, messages=HELLO)
    await client.close()


async def test_a_failover_to_another_engine_family_translates_for_the_new_one(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    # "llama3.2" is on this node's llama-server, which is down (nothing listens), and on an
    # Ollama added by address. The Ollama client's request goes to llama-server first (pinned),
    # translated, fails before its commit, and is served by Ollama as is.
    with refusing_port() as dead:
        first = local(f"http://127.0.0.1:{dead}", ["llama3.2"])
        proxy = await start_proxy(llamacpp=first)
        other = RouteTarget(
            node_id="ollama-box", kind="engine", base_url=ollama_emulator, models=[OLLAMA_MODEL]
        )
        proxy.targets = ProxyTargets(
            node_id=proxy.targets.node_id,
            engines={"llamacpp": [first], "ollama": [other]},
            pins={"llamacpp": first.node_id},
        )
        await proxy.wait_table()
        client = ollama.AsyncClient(host=proxy.url("ollama"))
        answer = await client.chat(model="llama3.2", messages=HELLO, options={"num_predict": 3})
    assert answer.done and answer.message.content
    # The job's end reaches the broker in the worker's next batch, maybe after the answer.
    ended = await proxy.wait_job(lambda e: e["kind"] in ("completed", "failed", "cancelled"))
    assert ended["kind"] == "completed"
    assert proxy.events()[-1] is ended
    submitted = [e for e in proxy.events() if e["kind"] == "submitted" and e.get("target")]
    assert [(e["engine"], e["target"]) for e in submitted] == [
        ("llamacpp", first.node_id),
        ("ollama", "ollama-box"),
    ]
