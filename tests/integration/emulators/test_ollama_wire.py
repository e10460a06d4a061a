"""Byte-level checks of the Ollama emulator (standing in for Ollama): NDJSON and SSE framing,
content types, error bodies and statuses, gin's 404/405, the Host check."""

from __future__ import annotations

import json

import httpx

from tests.integration.emulators.conftest import Emulator

CHAT = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}


async def test_ollama_emulator_liveness_version_and_head_like_ollama(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        root = await client.get("/")
        head = await client.head("/")
        version = await client.get("/api/version")
    assert (root.status_code, root.text) == (200, "Ollama is running")
    assert root.headers["content-type"] == "text/plain; charset=utf-8"
    assert head.status_code == 200 and head.content == b""
    assert version.headers["content-type"] == "application/json; charset=utf-8"
    assert set(version.json()) == {"version"}


async def test_ollama_emulator_unknown_path_and_wrong_method_use_gin_bodies(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        missing = await client.get("/api/nothing")
        wrong = await client.get("/api/generate")
    assert (missing.status_code, missing.text) == (404, "404 page not found")
    assert (wrong.status_code, wrong.text) == (405, "405 method not allowed")


async def test_ollama_emulator_generate_streams_ndjson_one_object_per_line(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        body = {"model": "llama3.2", "prompt": "hi"}
        response = await client.post("/api/generate", json=body)
    assert response.headers["content-type"] == "application/x-ndjson"
    raw = response.content
    assert raw.endswith(b"\n") and b"\n\n" not in raw and not raw.startswith(b"data:")
    objects = [json.loads(line) for line in raw.split(b"\n")[:-1]]
    assert all(set(o) >= {"model", "created_at", "done"} for o in objects)
    assert [o["done"] for o in objects] == [False] * (len(objects) - 1) + [True]
    final = objects[-1]
    assert final["response"] == "" and final["done_reason"] == "stop"
    assert isinstance(final["context"], list)
    assert objects[0]["created_at"].endswith("Z") and "model" in objects[0]
    assert "eval_count" not in objects[0], "metrics are omitempty until the final chunk"


async def test_ollama_emulator_errors_have_ollama_statuses_and_flat_bodies(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        empty = await client.post("/api/chat", content=b"")
        no_model = await client.post("/api/chat", json={"messages": []})
        unknown = await client.post("/api/chat", json={**CHAT, "model": "ghost"})
        legacy = await client.post("/api/embeddings", json={"model": "ghost", "prompt": "x"})
        bad_option = await client.post(
            "/api/generate", json={"model": "llama3.2", "prompt": "x", "options": {"seed": "a"}}
        )
        bad_keep_alive = await client.post(
            "/api/generate", json={"model": "llama3.2", "keep_alive": "3600"}
        )
    assert (empty.status_code, empty.json()) == (400, {"error": "missing request body"})
    assert (no_model.status_code, no_model.json()) == (400, {"error": "model is required"})
    assert (unknown.status_code, unknown.json()) == (404, {"error": "model 'ghost' not found"})
    assert legacy.status_code == 404
    assert legacy.json() == {"error": 'model "ghost" not found, try pulling it first'}
    assert bad_option.status_code == 500
    assert bad_option.json() == {"error": 'option "seed" must be of type integer'}
    assert bad_keep_alive.status_code == 400
    assert bad_keep_alive.json() == {"error": 'time: missing unit in duration "3600"'}
    assert unknown.headers["content-type"] == "application/json; charset=utf-8"


async def test_ollama_emulator_delete_answers_200_with_an_empty_body(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        deleted = await client.request("DELETE", "/api/delete", json={"model": "llama3.2"})
        tags = (await client.get("/api/tags")).json()
        copy_missing = await client.post("/api/copy", json={"source": "x", "destination": "y"})
    assert (deleted.status_code, deleted.content) == (200, b"")
    assert [m["name"] for m in tags["models"]] == ["nomic-embed-text:latest"]
    assert copy_missing.status_code == 404


async def test_ollama_emulator_unknown_pull_fails_inside_a_200_stream(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        streamed = await client.post("/api/pull", json={"model": "ghost"})
        waited = await client.post("/api/pull", json={"model": "ghost", "stream": False})
    assert streamed.status_code == 200
    assert streamed.text == (
        '{"status":"pulling manifest"}\n{"error":"pull model manifest: file does not exist"}\n'
    )
    assert waited.status_code == 500


async def test_ollama_emulator_v1_chat_streams_sse_ending_in_done(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"] == "text/event-stream"
    raw = response.text
    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")[:-1]
    assert all(event.startswith("data: ") and "\n" not in event for event in events)
    chunks = [json.loads(event[6:]) for event in events[:-1]]
    assert len({(c["id"], c["created"]) for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finishes = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1 and finishes[0]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[0]["system_fingerprint"] == "fp_ollama"


async def test_ollama_emulator_v1_errors_are_openai_objects(ollama_emulator: Emulator) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        unknown = await client.post("/v1/chat/completions", json={**CHAT, "model": "ghost"})
        empty = await client.post("/v1/chat/completions", json={**CHAT, "messages": []})
        retrieve = await client.get("/v1/models/ghost")
    assert unknown.status_code == 404
    assert unknown.json() == {
        "error": {
            "message": "model 'ghost' not found",
            "type": "not_found_error",
            "param": None,
            "code": None,
        }
    }
    assert empty.status_code == 400
    assert empty.json()["error"]["message"] == "[] is too short - 'messages'"
    assert retrieve.status_code == 404


async def test_ollama_emulator_v1_models_is_null_when_nothing_is_installed(
    start_ollama: object,
) -> None:
    emulator = await start_ollama(models=())  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=emulator.url) as client:
        listed = await client.get("/v1/models")
        tags = await client.get("/api/tags")
    assert listed.json() == {"object": "list", "data": None}
    assert tags.json() == {"models": []}


async def test_ollama_emulator_rejects_a_foreign_host_header_on_loopback(
    ollama_emulator: Emulator,
) -> None:
    async with httpx.AsyncClient(base_url=ollama_emulator.url) as client:
        foreign = await client.get("/api/tags", headers={"Host": "example.com"})
        local = await client.get("/api/tags", headers={"Host": "localhost:11434"})
        preflight = await client.options(
            "/api/chat",
            headers={
                "Origin": "http://localhost:3000",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,x-stainless-os",
            },
        )
    assert (foreign.status_code, foreign.content) == (403, b"")
    assert local.status_code == 200
    assert preflight.status_code == 204
    assert "x-stainless-os" in preflight.headers["access-control-allow-headers"]
