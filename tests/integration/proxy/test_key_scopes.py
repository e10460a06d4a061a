"""LAN API keys' scopes and use at a real broker's front door, from another computer: an
inference key chats and lists models but is refused the engine's own paths (a delete leaves the
model there); a key made with ``pair api-key create NAME --admin`` deletes it; each key's last
use reaches ``pair api-key list`` and the chat's job names the key and the source address.

Another computer is played by connecting to this machine's own network address (not loopback).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from backend.protocol import methods
from backend.protocol.types.jobs import JobRecord, JobsQuery
from backend.workers.proxy.doors.key_use import REPORT_ENV
from tests.integration.conftest import Broker, Client
from tests.integration.proxy.lan_support import (
    api_key,
    network_address_or_skip,
    ollama_data_dir,
)

KEY = re.compile(r"pair-[A-Za-z0-9_-]{43}")


@pytest.fixture
def lan_address(monkeypatch: pytest.MonkeyPatch) -> str:
    """This machine's network address; the broker reports key use every 0.2 s, unannounced."""
    address = network_address_or_skip()
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    monkeypatch.setenv(REPORT_ENV, "0.2")
    return address


async def _send(
    url: str, method: str, path: str, secret: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as client:
        return await client.request(method, path, headers=headers, json=body)


async def _models(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
        return [entry["name"] for entry in (await client.get("/api/tags")).json()["models"]]


async def _until(check: Any, timeout: float = 15.0) -> Any:
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(0.1)
    return found


def _chat(url: str, secret: str) -> ollama.ChatResponse:
    headers = {"Authorization": f"Bearer {secret}"}
    client = ollama.Client(host=url, headers=headers, trust_env=False, timeout=30)
    return client.chat("tinyllama", messages=[{"role": "user", "content": "Hi"}])


async def _chat_job(client: Client) -> JobRecord | None:
    jobs = await client.typed(methods.JOBS_GET_INITIAL, JobsQuery(limit=10))
    return next((job for job in jobs.jobs if job.model.startswith("tinyllama")), None)


async def test_an_inference_key_is_refused_engine_admin_and_every_use_is_recorded(
    start_broker: Any, lan_address: str, tmp_path: Path
) -> None:
    broker: Broker = start_broker(data_dir=ollama_data_dir(tmp_path, "node-keys"))
    laptop = KEY.findall(await api_key(broker.data_dir, "create", "laptop"))[0]
    printed = await api_key(broker.data_dir, "create", "ops", "--admin")
    ops = KEY.findall(printed)[0]
    assert "admin" in printed
    async with broker.connect(engine_events=False) as client:
        await client.call(methods.ENGINE_START, {"engine": "ollama"}, timeout=60)
        port = (await client.typed(methods.STATUS)).ports.ollama
        local, lan = f"http://127.0.0.1:{port}", f"http://{lan_address}:{port}"
        await _until(lambda: _has(local, "qwen2:0.5b"), timeout=30)
        await client.call(methods.SETTINGS_SET, {"values": {"lan_access": True}})

        async def admitted() -> bool:
            try:
                return (await _send(lan, "GET", "/api/tags", laptop)).status_code == 200
            except httpx.ConnectError:
                return False  # the doors are still being bound on every address

        await _until(admitted)
        body = {"model": "qwen2:0.5b"}
        refused = await _send(lan, "DELETE", "/api/delete", laptop, body)
        assert refused.status_code == 403 and "admin scope" in refused.json()["error"]
        assert "qwen2:0.5b" in await _models(local), "the model is still there"
        assert (await _send(lan, "DELETE", "/api/delete", ops, body)).status_code == 200
        assert "qwen2:0.5b" not in await _models(local)

        assert (await asyncio.to_thread(_chat, lan, laptop)).message.content
        job = await _until(lambda: _chat_job(client))
        assert (job.client, job.client_address) == ("laptop", lan_address)

        async def both_used() -> dict[str, Any] | None:
            listed = json.loads(await api_key(broker.data_dir, "list", "--json"))
            used = {key["name"]: key for key in listed if key["last_used_at"] is not None}
            return used if len(used) == 2 else None

        used = await _until(both_used)
        assert {name: key["scope"] for name, key in used.items()} == {
            "laptop": "inference",
            "ops": "admin",
        }
        table = await api_key(broker.data_dir, "list")
        assert "never" not in table and "just now" in table


async def _has(url: str, model: str) -> bool:
    try:
        return model in await _models(url)
    except httpx.HTTPError:
        return False
