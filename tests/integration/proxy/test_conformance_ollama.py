"""engine-apis.md §6 through the Ollama front door: the items a proxy must preserve in
discovery, the model list, errors, pull/delete/copy and bad inputs (generation and streaming are
in ``test_conformance_ollama_generate.py``).

The Ollama emulator stands behind the door (one proxy and one emulator per module, so the
suite stays fast); each test is named after its checklist number.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import ollama
import pytest
import pytest_asyncio

from backend.devtools.emulators.ollama_state import OllamaConfig
from tests.integration.proxy.conformance import (
    BODIES,
    CHAT,
    HEX_DIGEST,
    PROMPT,
    OllamaDoor,
    both_endpoints,
    check_cors_preflight,
    fast_ollama_behind_door,
    loaded_names,
    ollama_behind_door,
    pull_lines,
    rfc3339,
    serving_proxy,
    unload,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def door() -> AsyncIterator[OllamaDoor]:
    """A fast emulator (a few ms per reply) behind the door; 0.25 s per pull."""
    async with fast_ollama_behind_door() as running:
        yield running


# Transport and discovery


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_c01_root_answers_ollama_is_running(door: OllamaDoor, method: str) -> None:
    async with door.client() as client:
        response = await client.request(method, "/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.content == (b"Ollama is running" if method == "GET" else b"")


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_c02_version_answers_a_semver(door: OllamaDoor, method: str) -> None:
    async with door.client() as client:
        response = await client.request(method, "/api/version")
    assert response.status_code == 200
    if method == "GET":
        assert re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", response.json()["version"])


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/no-such-route", 404),
        ("POST", "/no/such/route", 404),
        ("GET", "/api/generate", 405),
        ("GET", "/api/pull", 405),
        ("POST", "/api/tags", 405),
    ],
)
async def test_c03_engine_404_and_405_pass_through(
    door: OllamaDoor, method: str, path: str, status: int
) -> None:
    async with door.client() as client:
        response = await client.request(method, path)
    assert response.status_code == status


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/version", None),
        ("GET", "/api/tags", None),
        ("GET", "/api/ps", None),
        ("POST", "/api/show", {"model": "llama3.2"}),
        ("POST", "/api/generate", {**PROMPT, "stream": False}),
        ("POST", "/api/chat", {**CHAT, "stream": False}),
        ("POST", "/api/generate", {"model": "no-such-model", "prompt": "x"}),
    ],
)
async def test_c05_json_answers_are_utf8_json(
    door: OllamaDoor, method: str, path: str, body: dict[str, Any] | None
) -> None:
    async with door.client() as client:
        response = await client.request(method, path, json=body)
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert isinstance(response.json(), dict)


async def test_c06_cors_preflight_from_localhost_3000_is_allowed(door: OllamaDoor) -> None:
    async with door.client() as client:
        await check_cors_preflight(
            client,
            "/api/chat",
            {**CHAT, "stream": False},
            ["authorization", "content-type", "x-stainless-os", "x-stainless-lang"],
        )


@pytest.mark.parametrize("authorization", [None, "Bearer x"])
async def test_c07_authorization_is_optional_and_ignored(
    door: OllamaDoor, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with door.client() as client:
        response = await client.post(
            "/api/generate", json={**PROMPT, "stream": False}, headers=headers
        )
    assert response.status_code == 200
    assert response.json()["done"] is True


# /api/tags, /api/ps, /api/show


async def test_c08_tags_is_a_models_list(door: OllamaDoor) -> None:
    async with door.client() as client:
        listed = (await client.get("/api/tags")).json()
    assert set(listed) == {"models"}
    assert isinstance(listed["models"], list) and listed["models"]


@pytest.mark.parametrize("engine", ["engine-with-no-models", "no-engine"])
async def test_c08_c15_empty_tags_and_ps_are_empty_lists(engine: str) -> None:
    async with contextlib.AsyncExitStack() as stack:
        if engine == "no-engine":
            proxy = await stack.enter_async_context(serving_proxy())
            url = proxy.url("ollama")
        else:
            bare = ollama_behind_door(OllamaConfig(models=()), [])
            url = (await stack.enter_async_context(bare)).url
        async with httpx.AsyncClient(base_url=url) as client:
            tags = await client.get("/api/tags")
            ps = await client.get("/api/ps")
    assert (tags.status_code, tags.json()) == (200, {"models": []})
    assert (ps.status_code, ps.json()) == (200, {"models": []})


async def test_c09_tag_entries_have_the_documented_fields(door: OllamaDoor) -> None:
    async with door.client() as client:
        entries = (await client.get("/api/tags")).json()["models"]
    for entry in entries:
        assert isinstance(entry["name"], str) and isinstance(entry["model"], str)
        rfc3339(entry["modified_at"])
        assert type(entry["size"]) is int
        assert HEX_DIGEST.match(entry["digest"]), "hex, without the sha256: prefix"
        assert set(entry["details"]) >= {
            "parent_model",
            "format",
            "family",
            "families",
            "parameter_size",
            "quantization_level",
        }


async def test_c10_tag_names_carry_a_tag(door: OllamaDoor) -> None:
    async with door.client() as client:
        names = [entry["name"] for entry in (await client.get("/api/tags")).json()["models"]]
    assert "llama3.2:latest" in names
    assert all(":" in name for name in names)


async def test_c12_ps_entries_have_the_documented_fields(door: OllamaDoor) -> None:
    async with door.client() as client:
        await client.post("/api/generate", json={"model": "llama3.2"})
        entries = (await client.get("/api/ps")).json()["models"]
    assert "llama3.2:latest" in [entry["name"] for entry in entries]
    for entry in entries:
        assert isinstance(entry["name"], str) and isinstance(entry["model"], str)
        assert type(entry["size"]) is int and type(entry["size_vram"]) is int
        assert HEX_DIGEST.match(entry["digest"])
        assert isinstance(entry["details"], dict)
        rfc3339(entry["expires_at"])
        assert type(entry["context_length"]) is int


async def test_c13_unload_leaves_ps_within_a_bounded_time(door: OllamaDoor) -> None:
    async with door.client() as client:
        await client.post("/api/generate", json={"model": "qwen2.5"})
        assert "qwen2.5:latest" in await loaded_names(client)
        await unload(client, "qwen2.5:latest")


async def test_c15_ps_with_nothing_loaded_is_an_empty_list(door: OllamaDoor) -> None:
    async with door.client() as client:
        for name in await loaded_names(client):
            await unload(client, name)
        response = await client.get("/api/ps")
    assert response.json() == {"models": []}


async def test_c16_show_a_known_model(door: OllamaDoor) -> None:
    async with door.client() as client:
        response = await client.post("/api/show", json={"model": "llama3.2"})
    assert response.status_code == 200
    shown = response.json()
    assert isinstance(shown["details"], dict) and isinstance(shown["model_info"], dict)
    assert "completion" in shown["capabilities"]


async def test_c16_show_an_unknown_model_is_404(door: OllamaDoor) -> None:
    async with door.client() as client:
        response = await client.post("/api/show", json={"model": "no-such-model"})
    assert response.status_code == 404
    assert response.json() == {"error": "model 'no-such-model' not found"}


# Errors (native)


@pytest.mark.parametrize("path", ["/api/generate", "/api/chat", "/api/show", "/api/embed"])
async def test_c39_unknown_model_is_404_not_found(door: OllamaDoor, path: str) -> None:
    body = {**BODIES.get(path, {"input": "x"}), "model": "no-such-model"}
    async with door.client() as client:
        response = await client.post(path, json=body)
    assert response.status_code == 404
    assert "not found" in response.json()["error"]


@pytest.mark.parametrize("stream", [True, False])
async def test_c39_ollama_client_sees_404_for_an_unknown_model(
    door: OllamaDoor, stream: bool
) -> None:
    async def generate(client: ollama.AsyncClient) -> None:
        if not stream:
            await client.generate("no-such-model", "hi")
            return
        async for _ in await client.generate("no-such-model", "hi", stream=True):
            pass

    async with ollama.AsyncClient(host=door.url) as client:
        with pytest.raises(ollama.ResponseError) as refused:
            await generate(client)
    assert refused.value.status_code == 404
    assert "not found" in refused.value.error


@both_endpoints
async def test_c40_empty_body_is_400_missing_request_body(door: OllamaDoor, path: str) -> None:
    async with door.client() as client:
        response = await client.post(path, content=b"")
    assert response.status_code == 400
    assert response.json() == {"error": "missing request body"}


@both_endpoints
@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "llama3.2", "prompt": "hi',
        b"[]",
        b'"llama3.2"',
        b'{"model": 42}',
        b'{"model": ["llama3.2"]}',
        b'{"model": {"name": "llama3.2"}}',
    ],
    ids=["truncated", "array", "string", "model-int", "model-list", "model-object"],
)
async def test_c41_malformed_json_is_400_with_an_error_string(
    door: OllamaDoor, path: str, body: bytes
) -> None:
    async with door.client() as client:
        response = await client.post(path, content=body)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json()["error"], str)


@pytest.mark.parametrize("model", [None, ""], ids=["absent", "empty"])
async def test_c42_chat_without_model_is_400_model_is_required(
    door: OllamaDoor, model: str | None
) -> None:
    body = {key: value for key, value in CHAT.items() if key != "model"}
    if model is not None:
        body["model"] = model
    async with door.client() as client:
        response = await client.post("/api/chat", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": "model is required"}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({**PROMPT, "model": "no-such-model"}, 404),  # answered by the door
        ({**PROMPT, "think": True}, 400),  # answered by the engine: llama3.2 does not think
    ],
    ids=["door-error", "engine-error"],
)
async def test_c43_pre_stream_errors_keep_their_status_and_json(
    door: OllamaDoor, body: dict[str, Any], status: int
) -> None:
    async with door.client() as client:
        response = await client.post("/api/generate", json=body)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize(
    ("method", "path", "content", "headers"),
    [
        ("POST", "/api/generate", b'{"model": "no-such-model"}', {}),
        ("POST", "/api/chat", b'{"model": ', {}),
        ("POST", "/api/generate", b'{"model": "llama3.2", "prompt": "x", "think": true}', {}),
        ("DELETE", "/api/delete", b'{"model": "no-such-model"}', {}),
        ("POST", "/api/show", b'{"model": ""}', {}),
        ("GET", "/api/tags", None, {"Host": "evil.example:11434"}),
    ],
    ids=["unknown-model", "truncated", "engine-400", "engine-404", "no-model", "host"],
)
async def test_c46_api_errors_are_flat_strings(
    door: OllamaDoor, method: str, path: str, content: bytes | None, headers: dict[str, str]
) -> None:
    async with door.client() as client:
        response = await client.request(method, path, content=content, headers=headers)
    assert response.status_code >= 400
    error = response.json()
    assert set(error) == {"error"} and isinstance(error["error"], str)


# Pull / delete / copy


async def test_c47_pull_streams_ndjson_from_pulling_manifest(door: OllamaDoor) -> None:
    response, lines = await pull_lines(door, "gemma3")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert lines[0] == {"status": "pulling manifest"}


async def test_c48_pull_progress_grows_up_to_the_total(door: OllamaDoor) -> None:
    _, lines = await pull_lines(door, "smollm2")
    progress = [line for line in lines if "digest" in line]
    assert progress
    seen: dict[str, int] = {}
    for line in progress:
        assert line["status"].startswith("pulling ")
        assert line["digest"].startswith("sha256:")
        assert type(line["total"]) is int
        completed = line.get("completed", 0)
        assert seen.get(line["digest"], 0) <= completed <= line["total"]
        seen[line["digest"]] = completed
    assert all(seen[line["digest"]] == line["total"] for line in progress)
    assert len(progress) > len(seen), "the large layer reports progress more than once"


async def test_c49_pull_ends_with_verify_write_and_success(door: OllamaDoor) -> None:
    _, lines = await pull_lines(door, "tinyllama")
    statuses = [line.get("status") for line in lines]
    assert statuses[-1] == "success" and lines[-1] == {"status": "success"}
    assert "verifying sha256 digest" in statuses and "writing manifest" in statuses


async def test_c50_unknown_model_pull_reports_the_manifest_error(door: OllamaDoor) -> None:
    response, lines = await pull_lines(door, "no-such-library-model")
    assert response.status_code == 200
    assert lines == [
        {"status": "pulling manifest"},
        {"error": "pull model manifest: file does not exist"},
    ]


async def test_c51_pull_without_stream_answers_one_success(door: OllamaDoor) -> None:
    async with door.client() as client:
        response = await client.post("/api/pull", json={"model": "all-minilm", "stream": False})
    assert response.status_code == 200
    assert response.json() == {"status": "success"}
    async with ollama.AsyncClient(host=door.url) as client:
        pulled = await client.pull("all-minilm", stream=False)
    assert pulled.status == "success"


async def test_c11_pulled_model_is_listed_and_deleted_one_is_not(door: OllamaDoor) -> None:
    async with door.client() as client:
        await client.post("/api/pull", json={"model": "phi4", "stream": False})
        after_pull = [e["name"] for e in (await client.get("/api/tags")).json()["models"]]
        await client.request("DELETE", "/api/delete", json={"model": "phi4"})
        after_delete = [e["name"] for e in (await client.get("/api/tags")).json()["models"]]
    assert "phi4:latest" in after_pull
    assert "phi4:latest" not in after_delete


async def test_c54_delete_answers_200_empty_and_404_for_unknown(door: OllamaDoor) -> None:
    async with door.client() as client:
        deleted = await client.request("DELETE", "/api/delete", json={"model": "phi3"})
        again = await client.request("DELETE", "/api/delete", json={"model": "phi3"})
    assert (deleted.status_code, deleted.content) == (200, b"")
    assert again.status_code == 404
    assert isinstance(again.json()["error"], str)


async def test_c55_copy_answers_200_empty_and_404_for_a_missing_source(door: OllamaDoor) -> None:
    async with door.client() as client:
        copied = await client.post(
            "/api/copy", json={"source": "llama3.2", "destination": "copied-llama"}
        )
        missing = await client.post(
            "/api/copy", json={"source": "no-such-model", "destination": "other"}
        )
        await client.request("DELETE", "/api/delete", json={"model": "copied-llama"})
    assert (copied.status_code, copied.content) == (200, b"")
    assert missing.status_code == 404


async def test_c56_ollama_client_copy_and_delete_report_success(door: OllamaDoor) -> None:
    async with ollama.AsyncClient(host=door.url) as client:
        copied = await client.copy("llama3.2", "client-copy")
        listed = [model.model for model in (await client.list()).models]
        deleted = await client.delete("client-copy")
    assert (copied.status, deleted.status) == ("success", "success")
    assert "client-copy:latest" in listed


# Bad inputs at the door


async def test_door_refuses_a_40_mib_body_with_413(door: OllamaDoor) -> None:
    body = b'{"model": "llama3.2", "prompt": "' + b"x" * (40 * 1024 * 1024) + b'"}'
    async with door.client(timeout=30) as client:
        response = await client.post("/api/generate", content=body)
    assert response.status_code == 413
    assert isinstance(response.json()["error"], str)


async def test_door_refuses_a_rebinding_host_with_403_json(door: OllamaDoor) -> None:
    async with door.client() as client:
        response = await client.post(
            "/api/generate", json=PROMPT, headers={"Host": "evil.example:11434"}
        )
    assert response.status_code == 403
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json()["error"], str)
    assert (await door.engine_state())["active"] == []
