"""A real broker pointed at the hub emulator (``PAIR_HUB_URL``): it finds GGUF repositories,
lists a repository's files with the one that fits the given memory, and llama.cpp's pull by URL
follows the hub's redirect and puts the suggested file in the store, where it is listed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.devtools.emulators.server import EmulatorServer
from backend.protocol import errors, methods
from backend.protocol.types.hub import HubQuery, HubRepoQuery
from tests.integration.conftest import Broker

pytest_plugins = ["tests.engines.fixtures"]

REPO = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
SUGGESTED = "qwen2.5-0.5b-instruct-q4_k_m.gguf"


async def test_search_files_and_pull_the_suggested_file_into_llamacpp(
    hub: EmulatorServer,
    start_broker: Callable[..., Broker],
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_path: Path,
) -> None:
    monkeypatch.setenv("PAIR_HUB_URL", hub.url)
    broker = start_broker()
    async with broker.connect() as client:
        found = await client.typed(methods.HUB_SEARCH, HubQuery(query="qwen", limit=5), 30)
        assert [model.repo for model in found.models][:1] == [REPO]
        # 620 MB of memory: 496 MB of room, where Q4_K_M (491.4 MB) is the one that fits
        query = HubRepoQuery(repo=REPO, memory_bytes=620_000_000)
        files = await client.typed(methods.HUB_FILES, query, 30)
        assert files.suggested == SUGGESTED, files.reason
        url = next(file.url for file in files.files if file.name == files.suggested)
        await client.call(
            "engine:action",
            {"engine": "llamacpp", "action": "pull_model", "url": url},
            timeout=120,
        )
        listed = await client.call(
            "engine:action", {"engine": "llamacpp", "action": "list_models"}, timeout=30
        )
        assert listed["names"] == [SUGGESTED.removesuffix(".gguf")]
    store = broker.data_dir / "models" / "llamacpp"
    pulled = await asyncio.to_thread((store / SUGGESTED).read_bytes)
    assert pulled == await asyncio.to_thread(tiny_model_path.read_bytes)


async def test_bad_input_and_an_unknown_repository_are_clear_errors(
    hub: EmulatorServer,
    start_broker: Callable[..., Broker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAIR_HUB_URL", hub.url)
    broker = start_broker()
    async with broker.connect(engine_events=False) as client:
        with pytest.raises(errors.InvalidParams, match="type some words"):
            await client.typed(methods.HUB_SEARCH, HubQuery(query="  "))
        with pytest.raises(errors.InvalidParams, match="write it as owner/name"):
            await client.typed(methods.HUB_FILES, HubRepoQuery(repo="qwen"))
        with pytest.raises(errors.NotFound, match="no public repository nobody/nothing"):
            await client.typed(methods.HUB_FILES, HubRepoQuery(repo="nobody/nothing"), 30)
        split = f"{hub.url}/unsloth/Qwen2.5-72B-Instruct-GGUF/resolve/main/Q8_0/"
        split += "Qwen2.5-72B-Instruct-Q8_0-00001-of-00002.gguf"
        with pytest.raises(errors.InvalidParams, match="part 1 of a model split in 2 files"):
            await client.call(
                "engine:action",
                {"engine": "llamacpp", "action": "pull_model", "url": split},
                timeout=30,
            )
