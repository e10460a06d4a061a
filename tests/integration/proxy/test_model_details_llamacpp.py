"""A real llama-server's model on the Ollama lists and /api/show: details from its GGUF file."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.doors.engine_models import forget_details
from tests.unit.proxy.listing_harness import Harness, get_json, running_harness

if TYPE_CHECKING:
    from pathlib import Path

    from tests.engines.fixtures import StartLlamaServer

pytest_plugins = ["tests.engines.fixtures"]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    forget_details()
    async with running_harness() as running:
        yield running
    forget_details()


async def test_ollama_lists_and_shows_a_llama_server_model_with_its_gguf_details(
    harness: Harness, start_llama_server: StartLlamaServer, tiny_model_path: Path
) -> None:
    server = start_llama_server(tiny_model_path, parallel=1, context=512)
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
    target = RouteTarget(
        node_id="self", kind="local", base_url=server.base_url, models=[model], single_model=True
    )
    door = await harness.door_over("ollama", {"llamacpp": [target]})

    status, tags = await get_json(door, "/api/tags")
    assert status == 200
    (entry,) = tags["models"]
    expected_details = {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "122K",
        "quantization_level": "F32",
    }
    assert entry["name"] == model and entry["details"] == expected_details
    assert entry["size"] == await asyncio.to_thread(os.path.getsize, tiny_model_path)

    status, loaded = await get_json(door, "/api/ps")
    assert status == 200 and [m["context_length"] for m in loaded["models"]] == [512]

    response = await door.post("/api/show", json={"model": model})
    assert response.status == 200
    shown: dict[str, Any] = await response.json()
    assert shown["details"] == expected_details
    assert shown["model_info"]["general.architecture"] == "llama"
    assert shown["model_info"]["llama.context_length"] == 2048
    assert shown["capabilities"] == ["completion"]
    assert "message['role']" in shown["template"]
