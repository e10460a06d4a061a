"""The Hugging Face client against the hub emulator over real sockets: searches, file lists,
HF's redirect to its CDN, and plain-English errors when the hub is away, slow or says no."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import httpx
import pytest
from aiohttp import web

from backend.components.hub.client import HubClient, hub_url
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol import errors
from tests.support.ports import free_port

pytest_plugins = ["tests.engines.fixtures"]


async def test_a_search_answers_matching_gguf_repositories_most_downloaded_first(
    hub: EmulatorServer,
) -> None:
    models = await HubClient(hub.url).search("instruct", 2)
    assert [model.repo for model in models] == [
        "bartowski/Llama-3.2-1B-Instruct-GGUF",
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
    ]
    assert await HubClient(hub.url).search("no such model", 20) == []


async def test_a_repository_lists_its_models_with_urls_that_redirect_to_a_gguf(
    hub: EmulatorServer, tiny_model_path: Path
) -> None:
    files = await HubClient(hub.url + "/").files("Qwen/Qwen2.5-0.5B-Instruct-GGUF")
    assert len(files) == 9
    q4 = next(file for file in files if file.quant == "Q4_K_M")
    assert q4.url == f"{hub.url}/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/{q4.name}"
    async with aiohttp.ClientSession() as session, session.get(q4.url) as response:
        assert response.history[0].status == 302  # Hugging Face sends downloads to its CDN
        assert response.url.path.startswith("/cdn/")
        body = await response.read()
    assert body == await asyncio.to_thread(tiny_model_path.read_bytes)


async def test_an_unknown_repository_is_not_found_by_name(hub: EmulatorServer) -> None:
    with pytest.raises(errors.NotFound) as caught:
        await HubClient(hub.url).files("nobody/nothing-GGUF")
    assert caught.value.message == "Hugging Face has no public repository nobody/nothing-GGUF"


async def test_a_hub_that_is_not_there_is_said_in_words() -> None:
    port = free_port()
    with pytest.raises(errors.Unavailable) as caught:
        await HubClient(f"http://127.0.0.1:{port}").search("qwen", 5)
    message = caught.value.message
    assert message.startswith(f"Hugging Face did not answer: cannot connect to 127.0.0.1:{port} (")
    assert "ssl:default" not in message and "Error" not in message


async def test_a_hub_that_does_not_answer_in_time_is_said_in_words() -> None:
    release = asyncio.Event()

    async def stalled(_: web.Request) -> web.Response:
        await release.wait()
        return web.json_response([])

    app = web.Application()
    app.router.add_get("/api/models", stalled)
    server = EmulatorServer(app)
    await server.start()
    try:
        with pytest.raises(errors.Unavailable) as caught:
            await HubClient(server.url, timeout_s=0.2).search("q", 5)
        assert caught.value.message.endswith("no answer to the search for 'q' within 0.2 s")
    finally:
        release.set()
        await server.stop()


async def test_an_error_or_a_strange_answer_is_unavailable_in_words() -> None:
    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=503)

    async def strange(_: web.Request) -> web.Response:
        return web.json_response({"models": []})

    app = web.Application()
    app.router.add_get("/api/models", broken)
    app.router.add_get("/api/models/a/b/tree/main", strange)
    server = EmulatorServer(app)
    await server.start()
    try:
        with pytest.raises(errors.Unavailable, match="HTTP 503"):
            await HubClient(server.url).search("q", 5)
        with pytest.raises(errors.Unavailable, match="answer cannot be read: the file list"):
            await HubClient(server.url).files("a/b")
    finally:
        await server.stop()


def test_the_hub_address_comes_from_pair_hub_url() -> None:
    assert hub_url({}) == "https://huggingface.co"
    assert hub_url({"PAIR_HUB_URL": "http://127.0.0.1:9/"}) == "http://127.0.0.1:9"


def test_pair_emulate_hub_serves_on_the_given_port_until_stopped() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "backend", "emulate", "hub", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        announced = process.stdout.readline()
        assert announced.strip() == (
            f"Hugging Face emulator (standing in for Hugging Face) listening on "
            f"http://127.0.0.1:{port}"
        )
        answer = httpx.get(f"http://127.0.0.1:{port}/api/models?search=tinyllama", timeout=10)
        assert [entry["id"] for entry in answer.json()] == [
            "TheBloke/TinyLlama-1.1B-Chat-v1.0-GGUF"
        ]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
