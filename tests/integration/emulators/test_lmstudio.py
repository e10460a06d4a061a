"""The LM Studio emulator standing in for LM Studio: greeting, model lists, REST load/unload/
download, 200-with-error for unknown routes, JIT, parallel slots, disconnect cancellation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from backend.devtools.emulators.generation import TimingModel
from tests.integration.emulators.conftest import Emulator, StartLmStudio

CHAT = {"model": "qwen2.5-7b-instruct", "messages": [{"role": "user", "content": "hi"}]}
SLOW = TimingModel(load_delay=0.01, token_delay=0.02)


async def _get(emulator: Emulator, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=emulator.url) as client:
        return await client.get(path)


async def _post(emulator: Emulator, path: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=emulator.url, timeout=10) as client:
        return await client.post(path, json=body)


async def test_lmstudio_emulator_greets_and_answers_unknown_routes_with_200(
    lmstudio_emulator: Emulator,
) -> None:
    greeting = await _get(lmstudio_emulator, "/lmstudio-greeting")
    tags = await _get(lmstudio_emulator, "/api/tags")
    wrong = await _post(lmstudio_emulator, "/chat/completions", CHAT)
    assert greeting.json() == {"lmstudio": True}
    assert tags.status_code == 200
    assert tags.json() == {"error": "Unexpected endpoint or method. (GET /api/tags)"}
    assert wrong.json() == {"error": "Unexpected endpoint or method. (POST /chat/completions)"}


async def test_lmstudio_emulator_model_lists_follow_the_loaded_state(
    lmstudio_emulator: Emulator,
) -> None:
    v1_models = (await _get(lmstudio_emulator, "/v1/models")).json()
    assert v1_models["object"] == "list"
    assert {m["owned_by"] for m in v1_models["data"]} == {"organization_owner"}
    before = (await _get(lmstudio_emulator, "/api/v0/models")).json()["data"]
    assert {m["id"]: m["state"] for m in before} == {
        "qwen2.5-7b-instruct": "not-loaded",
        "text-embedding-nomic-embed-text-v1.5": "not-loaded",
    }
    await _post(lmstudio_emulator, "/v1/chat/completions", CHAT)  # JIT load
    after = (await _get(lmstudio_emulator, "/api/v0/models")).json()["data"]
    assert after[0]["state"] == "loaded" and after[0]["type"] == "llm"
    (entry, embedder) = (await _get(lmstudio_emulator, "/api/v1/models")).json()["models"]
    (instance,) = entry["loaded_instances"]
    assert instance["id"] == "qwen2.5-7b-instruct" and instance["config"]["parallel"] == 4
    assert embedder["type"] == "embedding" and "architecture" not in embedder


async def test_lmstudio_emulator_rest_load_makes_second_instances_and_unloads(
    lmstudio_emulator: Emulator,
) -> None:
    rejected = await _post(
        lmstudio_emulator, "/api/v1/models/load", {"model": "qwen2.5-7b-instruct", "parallel": 1}
    )
    assert rejected.status_code == 400, "the REST load has no parallel field"
    first = (await _post(lmstudio_emulator, "/api/v1/models/load", {"model": CHAT["model"]})).json()
    second = (
        await _post(lmstudio_emulator, "/api/v1/models/load", {"model": CHAT["model"]})
    ).json()
    assert (first["status"], first["type"]) == ("loaded", "llm")
    assert (first["instance_id"], second["instance_id"]) == (CHAT["model"], f"{CHAT['model']}:2")
    unloaded = await _post(lmstudio_emulator, "/api/v1/models/unload", {"instance_id": "ghost"})
    assert unloaded.status_code == 404
    done = await _post(lmstudio_emulator, "/api/v1/models/unload", {"instance_id": CHAT["model"]})
    assert done.json() == {"instance_id": CHAT["model"]}
    models = (await _get(lmstudio_emulator, "/api/v1/models")).json()["models"]
    assert [i["id"] for i in models[0]["loaded_instances"]] == [f"{CHAT['model']}:2"]


async def test_lmstudio_emulator_download_job_completes_and_installs(
    start_lmstudio: StartLmStudio,
) -> None:
    emulator = await start_lmstudio(download_seconds=0.2)
    present = await _post(emulator, "/api/v1/models/download", {"model": CHAT["model"]})
    assert present.json() == {"status": "already_downloaded"}
    job = (await _post(emulator, "/api/v1/models/download", {"model": "qwen/qwen3-4b"})).json()
    assert job["status"] == "downloading" and job["job_id"].startswith("job_")
    status: dict[str, Any] = {}
    async with asyncio.timeout(10):
        while status.get("status") != "completed":
            await asyncio.sleep(0.05)
            status = (
                await _get(emulator, f"/api/v1/models/download/status/{job['job_id']}")
            ).json()
    assert status["downloaded_bytes"] == status["total_size_bytes"]
    keys = [m["id"] for m in (await _get(emulator, "/v1/models")).json()["data"]]
    assert "qwen/qwen3-4b" in keys


async def test_lmstudio_emulator_unknown_model_gets_the_invalid_identifier_error(
    lmstudio_emulator: Emulator,
) -> None:
    response = await _post(lmstudio_emulator, "/v1/chat/completions", {**CHAT, "model": "o4-mini"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["message"].startswith('Invalid model identifier "o4-mini".')
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        "model",
        "model_not_found",
    )


async def test_lmstudio_emulator_without_jit_reports_no_models_loaded(
    start_lmstudio: StartLmStudio,
) -> None:
    emulator = await start_lmstudio(jit=False)
    response = await _post(emulator, "/v1/chat/completions", CHAT)
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("No models loaded.")
    assert (await _get(emulator, "/v1/models")).json()["data"] == []


async def test_lmstudio_emulator_streams_openai_sse_with_done(lmstudio_emulator: Emulator) -> None:
    response = await _post(lmstudio_emulator, "/v1/chat/completions", {**CHAT, "stream": True})
    assert response.headers["content-type"] == "text/event-stream"
    events = response.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(chunk["choices"][0]["logprobs"] is None for chunk in chunks)
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert chunks[0]["id"].startswith("chatcmpl-") and len(chunks[0]["id"]) == 30


async def test_lmstudio_emulator_queues_beyond_four_parallel_predictions(
    start_lmstudio: StartLmStudio,
) -> None:
    emulator = await start_lmstudio(timing=SLOW, reply_tokens=15)
    requests = [
        asyncio.ensure_future(_post(emulator, "/v1/chat/completions", CHAT)) for _ in range(5)
    ]
    busy = await emulator.wait_state(lambda s: len(s["active"]) == 4 and len(s["queued"]) == 1)
    assert busy["loaded"][0]["parallel"] == 4
    assert all(response.status_code == 200 for response in await asyncio.gather(*requests))
    records = sorted((await emulator.state())["finished"], key=lambda r: r["started_at"])
    first_four, last = records[:4], records[4]
    assert last["started_at"] >= min(record["finished_at"] for record in first_four)


async def test_lmstudio_emulator_stops_generating_when_the_client_disconnects(
    start_lmstudio: StartLmStudio,
) -> None:
    emulator = await start_lmstudio(timing=SLOW, reply_tokens=300)
    async with (
        httpx.AsyncClient(base_url=emulator.url, timeout=10) as client,
        client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response,
    ):
        lines = response.aiter_lines()
        assert (await anext(lines)).startswith("data: ")
    state = await emulator.wait_state(lambda s: s["cancelled"] == 1)
    assert state["finished"][0]["tokens"] < 300
    assert state["loaded"][0]["active"] == 0


@pytest.mark.parametrize("path", ["/api/v0/chat/completions", "/v1/chat/completions"])
async def test_lmstudio_emulator_non_streamed_chat_completion(
    lmstudio_emulator: Emulator, path: str
) -> None:
    body = (await _post(lmstudio_emulator, path, CHAT)).json()
    assert body["object"] == "chat.completion"
    assert body["system_fingerprint"] == CHAT["model"]
    assert ("stats" in body) == path.startswith("/api/v0")
