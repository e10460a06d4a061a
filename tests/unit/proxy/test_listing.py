"""Federated model lists against real servers: emulators, stand-in peers, broken upstreams."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from aiohttp import web

from backend.workers.proxy.doors import listing
from backend.workers.proxy.routing.candidates import RELAY_PREFIX
from tests.unit.proxy.listing_harness import (
    DEAD_URL,
    Harness,
    get_json,
    json_answer,
    running_harness,
    tag,
    target,
)

SECRET_HEADERS = {"Authorization": "Bearer local-secret", "Cookie": "session=1"}


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with running_harness() as running:
        yield running


async def test_ollama_tags_merge_local_first_and_dedupe_by_ollama_names(harness: Harness) -> None:
    local_url = await harness.ollama("llama3", "qwen2.5")
    peer_entries = [
        tag("LLaMA3", extra={"kept": True}),
        tag("phi3:mini", x_unknown=[1, 2.5, None]),
        tag("qwen2.5:latest"),
    ]
    peer_url, peer = await harness.stand_in(json_answer({"models": peer_entries}))
    engine_url = await harness.ollama("mistral", "llama3:latest")
    door = await harness.door(
        "ollama",
        target("peer", peer_url),
        target("engine", engine_url),
        target("local", local_url),
    )

    response = await door.get("/api/tags")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    merged = (await response.json())["models"]

    assert [entry["name"] for entry in merged] == [
        "llama3:latest",
        "qwen2.5:latest",
        "phi3:mini",
        "mistral:latest",
    ]
    async with harness.session.get(f"{local_url}/api/tags") as direct:
        local_entries = (await direct.json())["models"]
    assert merged[:2] == local_entries  # entries pass through unchanged
    assert merged[2] == peer_entries[1]
    assert [path for path, _ in peer.seen] == [f"{RELAY_PREFIX}/ollama/api/tags"]


async def test_ollama_v1_models_dedupe_by_the_same_rule_and_null_data_is_empty(
    harness: Harness,
) -> None:
    local_url = await harness.ollama("llama3")
    empty_url = await harness.ollama()  # Ollama answers ``data: null`` with nothing installed
    peer_data = [{"id": "llama3", "object": "model"}, {"id": "phi3:mini", "object": "model"}]
    peer_url, _ = await harness.stand_in(json_answer({"object": "list", "data": peer_data}))
    door = await harness.door(
        "ollama", target("local", local_url), target("engine", empty_url), target("peer", peer_url)
    )

    status, body = await get_json(door, "/v1/models")

    assert status == 200 and body["object"] == "list"
    assert [model["id"] for model in body["data"]] == ["llama3:latest", "phi3:mini"]
    assert body["data"][1] == peer_data[1]


async def test_lmstudio_models_dedupe_exactly(harness: Harness) -> None:
    local_url = await harness.lmstudio("qwen2.5-7b-instruct", "Llama-3")
    engine_url = await harness.lmstudio("llama-3", "qwen2.5-7b-instruct", "gemma-2")
    door = await harness.door("openai", target("local", local_url), target("engine", engine_url))

    status, body = await get_json(door, "/v1/models")

    assert status == 200
    assert [model["id"] for model in body["data"]] == [
        "qwen2.5-7b-instruct",
        "Llama-3",
        "llama-3",
        "gemma-2",
    ]
    assert body["data"][0] == {
        "id": "qwen2.5-7b-instruct",
        "object": "model",
        "owned_by": "organization_owner",
    }


async def test_dead_slow_and_malformed_upstreams_are_left_out(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listing, "LIST_TIMEOUT_S", 0.3)

    async def never_answers() -> web.StreamResponse:
        await harness.stand_ins[0].release.wait()
        return web.json_response({"models": []})

    slow_url, _ = await harness.stand_in(never_answers)
    bad_json_url, _ = await harness.stand_in(lambda: web.Response(text="{oops"))
    # LM Studio answers routes it does not have with HTTP 200 and an error object.
    wrong_shape_url, _ = await harness.stand_in(json_answer({"error": "Unexpected endpoint"}))
    failing_url, _ = await harness.stand_in(lambda: web.json_response({"models": []}, status=500))
    live_url = await harness.ollama("llama3")
    door = await harness.door(
        "ollama",
        target("engine", DEAD_URL, "dead"),
        target("engine", slow_url, "slow"),
        target("engine", bad_json_url, "bad-json"),
        target("engine", wrong_shape_url, "wrong-shape"),
        target("engine", failing_url, "failing"),
        target("engine", live_url, "live"),
    )

    status, body = await get_json(door, "/api/tags")

    assert status == 200
    assert [entry["name"] for entry in body["models"]] == ["llama3:latest"]
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    for node in ("dead", "slow", "bad-json", "wrong-shape", "failing"):
        assert f"({node})" in warned


async def test_every_upstream_failing_is_a_502_in_the_door_s_error_shape(
    harness: Harness,
) -> None:
    wrong_shape_url, _ = await harness.stand_in(json_answer({"error": "Unexpected endpoint"}))
    ollama_door = await harness.door("ollama", target("local", DEAD_URL))
    openai_door = await harness.door(
        "openai", target("local", DEAD_URL), target("engine", wrong_shape_url)
    )

    status, body = await get_json(ollama_door, "/api/tags")
    assert status == 502 and isinstance(body["error"], str)
    response = await openai_door.get("/v1/models")
    assert response.status == 502
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "bad_gateway"


async def test_oversized_answers_are_left_out_declared_or_streamed(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listing, "MAX_LIST_BYTES", 4096)
    padded = {"models": [tag("huge:1", padding="x" * 8192)]}

    declared_url, _ = await harness.stand_in(json_answer(padded))
    chunked_url = await harness.serve(_chunked_app(b'{"models": [' + b" " * 8192 + b"]}"))
    local_url = await harness.ollama("llama3")
    door = await harness.door(
        "ollama",
        target("local", local_url),
        target("engine", declared_url),
        target("peer", chunked_url),
    )

    status, body = await get_json(door, "/api/tags")

    assert status == 200
    assert [entry["name"] for entry in body["models"]] == ["llama3:latest"]
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "declares" in warned and "grew past the 4096-byte limit" in warned


def _chunked_app(body: bytes) -> web.Application:
    """A peer that streams ``body`` in 1 KiB chunks without declaring its length."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 1024):
            await response.write(body[start : start + 1024])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get(f"{RELAY_PREFIX}/ollama/api/tags", handle, allow_head=False)
    return app


async def test_no_target_and_empty_lists_answer_empty_arrays(harness: Harness) -> None:
    lonely_ollama = await harness.door("ollama")
    lonely_openai = await harness.door("openai")
    assert await get_json(lonely_ollama, "/api/tags") == (200, {"models": []})
    assert await get_json(lonely_openai, "/v1/models") == (200, {"object": "list", "data": []})

    empty_ollama = await harness.door("ollama", target("local", await harness.ollama()))
    empty_lmstudio = await harness.door("openai", target("local", await harness.lmstudio()))
    assert await get_json(empty_ollama, "/api/tags") == (200, {"models": []})
    assert await get_json(empty_ollama, "/v1/models") == (200, {"object": "list", "data": []})
    assert await get_json(empty_lmstudio, "/v1/models") == (200, {"object": "list", "data": []})


async def test_credentials_reach_only_this_node_s_engine(harness: Harness) -> None:
    recorded = json_answer({"models": [tag("llama3")]})
    local_url, local = await harness.stand_in(recorded)
    peer_url, peer = await harness.stand_in(recorded)
    engine_url, engine = await harness.stand_in(recorded)
    door = await harness.door(
        "ollama",
        target("local", local_url),
        target("peer", peer_url),
        target("engine", engine_url),
    )

    headers = {**SECRET_HEADERS, "X-Client": "kept", "Connection": "keep-alive"}
    status, _ = await get_json(door, "/api/tags?verbose=1", headers=headers)

    assert status == 200
    (local_path, local_headers), (peer_path, peer_headers), (_, engine_headers) = (
        local.seen[0],
        peer.seen[0],
        engine.seen[0],
    )
    assert (local_path, peer_path) == (
        "/api/tags?verbose=1",
        f"{RELAY_PREFIX}/ollama/api/tags?verbose=1",
    )
    assert local_headers["Authorization"] == "Bearer local-secret"
    assert local_headers["Cookie"] == "session=1"
    for forwarded in (local_headers, peer_headers, engine_headers):
        assert forwarded["X-Client"] == "kept"
    for remote in (peer_headers, engine_headers):
        assert "Authorization" not in remote and "Cookie" not in remote


def test_a_one_model_engine_lists_the_rest_of_its_store_after_the_model_it_holds() -> None:
    held = msgspec.Raw(
        b'{"id":"tiny","object":"model","created":5,"owned_by":"llamacpp","meta":{}}'
    )
    entries = listing.with_stored("llamacpp", [held], ["other", "tiny"])
    assert entries[0] is held, "the engine's own entry passes through unchanged"
    assert [msgspec.json.decode(entry)["id"] for entry in entries] == ["tiny", "other"]
    assert msgspec.json.decode(entries[1])["owned_by"] == "llamacpp"
