"""Replicas (the same weights' digest under several names and engines) are listed once, and
any of their names, or an alias, finds them at ``/v1/models/{id}`` and ``/api/show``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from backend.protocol.proxy import Door, ProxyTargets, RouteTarget
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.doors.listing import merge
from backend.workers.proxy.relay.serving import RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.listing_harness import (
    DoorClient,
    Harness,
    door_app,
    get_json,
    json_answer,
    running_harness,
)
from tests.unit.proxy.scripted_door import make_router

QWEN = "sha256:" + "d" * 64
GGUF = "qwen2.5-7b-instruct-q4_k_m.gguf"
STUDIO = "qwen2.5-7b-instruct@q4_k_m"


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with running_harness() as running:
        yield running


async def _door(harness: Harness, door: Door, table: ProxyTargets) -> DoorClient:
    router = make_router(harness.session, clock=FakeClock())
    router.update(table)
    client: DoorClient = TestClient(TestServer(door_app(DoorContext(door, router, RelayBoard()))))
    harness.clients.append(client)
    await client.start_server()
    return client


async def _table(harness: Harness) -> ProxyTargets:
    """This node's Ollama (qwen2.5:7b, llama3), a GPU box's llama-server holding the same
    weights as a GGUF file, and a Mac's LM Studio with them too under its own name."""
    ollama_url = await harness.ollama("qwen2.5:7b", "llama3")
    llama_url, _ = await harness.stand_in(json_answer({"object": "list", "data": [{"id": GGUF}]}))
    studio_url = await harness.lmstudio(STUDIO, "phi-3")
    return ProxyTargets(
        node_id="me",
        engines={
            "ollama": [
                RouteTarget(
                    node_id="me",
                    kind="local",
                    base_url=ollama_url,
                    models=["qwen2.5:7b", "llama3:latest"],
                    digests={"qwen2.5:7b": QWEN},
                )
            ],
            "llamacpp": [
                RouteTarget(
                    node_id="gpu",
                    kind="engine",
                    base_url=llama_url,
                    models=[GGUF],
                    digests={GGUF: QWEN},
                )
            ],
            "lmstudio": [
                RouteTarget(
                    node_id="mac",
                    kind="engine",
                    base_url=studio_url,
                    models=[STUDIO, "phi-3"],
                    digests={STUDIO: QWEN},
                )
            ],
        },
        aliases={"coder": GGUF},
    )


async def test_replicas_are_one_entry_named_as_the_doors_engine_names_them(
    harness: Harness,
) -> None:
    table = await _table(harness)
    ollama = await _door(harness, "ollama", table)
    status, tags = await get_json(ollama, "/api/tags")
    assert status == 200
    assert [entry["name"] for entry in tags["models"]] == ["qwen2.5:7b", "llama3:latest", "phi-3"]
    openai = await _door(harness, "openai", table)
    status, models = await get_json(openai, "/v1/models")
    assert [entry["id"] for entry in models["data"]] == [STUDIO, "llama3:latest", "phi-3"]
    llamacpp = await _door(harness, "llamacpp", table)
    status, models = await get_json(llamacpp, "/v1/models")
    assert [entry["id"] for entry in models["data"]] == [GGUF, "llama3:latest", "phi-3"]


async def test_any_name_or_an_alias_finds_the_model(harness: Harness) -> None:
    table = await _table(harness)
    openai = await _door(harness, "openai", table)
    for name in ("qwen2.5:7b", GGUF, "coder", STUDIO):
        status, entry = await get_json(openai, f"/v1/models/{name}")
        assert (status, entry["id"]) == (200, name)
    status, _ = await get_json(openai, "/v1/models/mistral")
    assert status == 404
    ollama = await _door(harness, "ollama", table)
    for name in (GGUF, "coder"):
        shown = await ollama.post("/api/show", json={"model": name})
        assert shown.status == 200, (name, await shown.text())
        assert "details" in await shown.json()


def _raw(name: str) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode({"name": name, "model": name}))


def _target(node: str, engine: str, digests: dict[str, str]) -> RouteTarget:
    return RouteTarget(node_id=node, kind="peer", base_url="", engine=engine, digests=digests)


def test_the_merge_keeps_models_without_a_digest_as_they_were() -> None:
    first = _target("a", "ollama", {})
    second = _target("b", "llamacpp", {})
    answers = [(first, [_raw("tiny:latest"), _raw("x")]), (second, [_raw("tiny"), _raw("y")])]
    merged = merge("tags", answers, "ollama")
    assert [engine for engine, _ in merged] == ["ollama", "ollama", "llamacpp"]
    assert [msgspec.json.decode(entry)["name"] for _, entry in merged] == [
        "tiny:latest",
        "x",
        "y",
    ]


def test_a_replica_group_is_listed_where_its_first_member_was_and_by_engine_order() -> None:
    other = "sha256:" + "e" * 64
    studio = _target("a", "lmstudio", {"s": QWEN, "t": other})
    llama = _target("b", "llamacpp", {"g.gguf": QWEN})
    ollama = _target("c", "ollama", {"t2:latest": other})
    answers = [
        (studio, [_raw("s"), _raw("t")]),
        (llama, [_raw("g.gguf")]),
        (ollama, [_raw("t2:latest")]),
    ]
    names = [msgspec.json.decode(e)["name"] for _, e in merge("tags", answers, "")]
    assert names == ["g.gguf", "t2:latest"], "llama.cpp's name first, then Ollama's"
    names = [msgspec.json.decode(e)["name"] for _, e in merge("tags", answers, "lmstudio")]
    assert names == ["s", "t"], "the door's own engine names them"
