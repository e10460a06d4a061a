"""Other computers at a real broker's front doors: not even a connection while LAN access is off
(the doors listen on loopback only); with it on, the official Ollama client gets in with an API
key, and not once the key is revoked: from the first request after the revoke is answered
(as a new alias answers from the first request after it is set).

A request from another computer is made on this one by connecting to the door at this
machine's own network address (not loopback), so the door sees that address as its peer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from backend.protocol import methods
from backend.protocol.types.apikeys import ApiKeyCreate, ApiKeyRef
from tests.integration.conftest import Broker, Client, proxy_pid
from tests.integration.proxy.lan_support import (
    api_key,
    network_address_or_skip,
    ollama_data_dir,
)

MESSAGES = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.fixture
def lan_address(monkeypatch: pytest.MonkeyPatch) -> str:
    """This machine's network address; the brokers started here do not announce themselves."""
    address = network_address_or_skip()
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    return address


async def _get(url: str, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
        return await client.get(path, headers=headers)


async def _door_port(client: Client) -> int:
    status = await client.typed(methods.STATUS)
    return status.ports.ollama


async def _set_lan_access(client: Client, on: bool) -> None:
    await client.call(methods.SETTINGS_SET, {"values": {"lan_access": on}})


async def _until_status(url: str, path: str, status: int, headers: dict[str, str]) -> Any:
    """The first answer to ``GET path`` with ``status``, waiting for the next routing tables
    (and, after LAN access is turned on, for the door to listen on every address)."""
    async with asyncio.timeout(10):
        while True:
            try:
                response = await _get(url, path, headers)
            except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
                await asyncio.sleep(0.05)
                continue
            if response.status_code == status:
                return response.json()
            await asyncio.sleep(0.05)


async def _until_refused(url: str, path: str, headers: dict[str, str]) -> None:
    """Wait until the door no longer accepts connections at ``url`` (back on loopback only)."""
    async with asyncio.timeout(10):
        while True:
            try:
                await _get(url, path, headers)
            except httpx.ConnectError:
                return
            except (httpx.ReadError, httpx.RemoteProtocolError):
                pass  # accepted by the all-address socket as it closed: the switch is under way
            await asyncio.sleep(0.05)


def _chat(url: str, secret: str | None, model: str = "tinyllama") -> ollama.ChatResponse:
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    client = ollama.Client(host=url, headers=headers, trust_env=False, timeout=30)
    return client.chat(model, messages=MESSAGES)


async def test_with_lan_access_off_another_computer_is_refused_even_with_a_key(
    start_broker: Any, lan_address: str
) -> None:
    broker: Broker = start_broker()
    printed = await api_key(broker.data_dir, "create", "laptop")
    secret = re.findall(r"pair-[A-Za-z0-9_-]{43}", printed)[0]
    assert f"OLLAMA_HOST=http://{lan_address}:" in printed and "pair api-key lan on" in printed
    async with broker.connect(engine_events=False) as client:
        port = await _door_port(client)
        lan = f"http://{lan_address}:{port}"
        # The doors listen on loopback only: another computer cannot even connect.
        for path in ("/api/tags", "/v1/models"):
            with pytest.raises(httpx.ConnectError):
                await _get(lan, path, {"Authorization": f"Bearer {secret}"})
        local = await _get(f"http://127.0.0.1:{port}", "/api/tags")
        assert local.status_code == 200, "this computer needs no key"
    (listed,) = json.loads(await api_key(broker.data_dir, "list", "--json"))
    assert (listed["name"], listed["prefix"]) == ("laptop", secret[:9]) and "secret" not in listed
    assert "Revoked" in await api_key(broker.data_dir, "revoke", listed["id"])
    assert json.loads(await api_key(broker.data_dir, "list", "--json")) == []


async def test_with_lan_access_on_a_key_lets_the_ollama_client_in_until_it_is_revoked(
    start_broker: Any, lan_address: str, tmp_path: Path
) -> None:
    broker: Broker = start_broker(data_dir=ollama_data_dir(tmp_path, "node-lan"))
    async with broker.connect(engine_events=False) as client:
        await client.call(methods.ENGINE_START, {"engine": "ollama"}, timeout=60)
        port = await _door_port(client)
        local, lan = f"http://127.0.0.1:{port}", f"http://{lan_address}:{port}"
        async with asyncio.timeout(30):  # the engine's models reach the routing table
            while "tinyllama:latest" not in str((await _get(local, "/api/tags")).json()):
                await asyncio.sleep(0.2)
        created = await client.typed(methods.APIKEYS_CREATE, ApiKeyCreate(name="laptop"))
        other = await client.typed(methods.APIKEYS_CREATE, ApiKeyCreate(name="phone"))
        key = {"Authorization": f"Bearer {created.secret}"}
        await _set_lan_access(client, True)
        await _until_status(lan, "/api/tags", 200, key)

        answer = await asyncio.to_thread(_chat, lan, created.secret)
        assert answer.message.content
        with pytest.raises(ollama.ResponseError) as missing:
            await asyncio.to_thread(_chat, lan, None)
        assert missing.value.status_code == 401
        assert "pair api-key create" in missing.value.error
        with pytest.raises(ollama.ResponseError) as wrong:
            await asyncio.to_thread(_chat, lan, created.secret[:-2] + "xx")
        assert wrong.value.status_code == 401
        assert (await _get(local, "/api/tags")).status_code == 200, "loopback: no key needed"

        # A change is in force when its call is answered: the next request sees it. While
        # the proxy worker cannot take the new table (stopped here), the revoke is not answered.
        alias = {"name": "sky", "target": "tinyllama:latest"}
        await client.call(methods.MODELS_ALIAS_SET, alias)
        worker = proxy_pid(await client.call("status"))
        assert worker is not None
        os.kill(worker, signal.SIGSTOP)
        try:
            revoke = asyncio.create_task(
                client.typed(methods.APIKEYS_REVOKE, ApiKeyRef(id=created.key.id))
            )
            await asyncio.sleep(0.3)
            assert not revoke.done(), "answered before the proxy worker had the change"
        finally:
            os.kill(worker, signal.SIGCONT)
        await revoke
        refused = await _get(lan, "/api/tags", key)
        assert refused.status_code == 401
        assert "pair api-key create" in refused.json()["error"]
        assert (await asyncio.to_thread(_chat, lan, other.secret, "sky")).message.content
        with pytest.raises(ollama.ResponseError) as revoked:
            await asyncio.to_thread(_chat, lan, created.secret)
        assert revoked.value.status_code == 401
        assert (await asyncio.to_thread(_chat, lan, other.secret)).message.content

        await _set_lan_access(client, False)
        await _until_refused(lan, "/api/tags", {"Authorization": f"Bearer {other.secret}"})
        listed = await client.typed(methods.APIKEYS_LIST)
        assert [entry.name for entry in listed] == ["phone"]
