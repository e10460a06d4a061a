"""A front door's port changed while everything runs: the door moves without a restart of the
broker or of the proxy worker, the old port closes, a request in flight there goes on, and a
port another program holds is refused with the door left where it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

from backend.components.proxy.listeners import listen_tcp
from backend.protocol import errors, methods
from backend.protocol.types.broker import BrokerStatus
from tests.integration.conftest import Broker
from tests.integration.proxy.conftest import StartProxy, free_port, local

MODELS = ["llama3.2:latest"]


async def tags(port: int) -> list[str]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        answer = await client.get("/api/tags")
        answer.raise_for_status()
        return [model["name"] for model in answer.json()["models"]]


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


async def test_a_door_moves_to_another_port_and_the_old_one_closes(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await start_proxy(ollama=local(ollama_emulator, MODELS))
    before, pid = proxy.component.ports()["ollama"], proxy.component.pid()
    assert await tags(before) == ["llama3.2:latest", "qwen2.5:latest"]

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{before}", timeout=30) as old:
        body = {"model": "llama3.2", "prompt": "hi", "options": {"num_predict": 500}}
        async with old.stream("POST", "/api/generate", json=body) as streaming:
            lines = streaming.aiter_lines()
            first = await anext(lines)  # in flight on the old port
            wanted = free_port()
            await proxy.component.move_doors({"ollama": wanted})
            rest = [line async for line in lines if line]
    assert first and rest and '"done":true' in rest[-1], "the request in flight went on"

    assert proxy.component.ports()["ollama"] == wanted
    assert proxy.component.endpoints()["ollama"] == f"http://127.0.0.1:{wanted}"
    assert await tags(wanted) == ["llama3.2:latest", "qwen2.5:latest"]
    assert await refused(before), "the old port no longer accepts"
    assert proxy.component.pid() == pid, "the worker was not restarted"


async def test_a_taken_port_is_refused_and_the_door_keeps_working(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await start_proxy(ollama=local(ollama_emulator, MODELS))
    before = proxy.component.ports()["ollama"]
    holder = listen_tcp("127.0.0.1", 0)  # another program's port
    taken = int(holder.getsockname()[1])
    try:
        with pytest.raises(errors.Conflict) as refusal:
            await proxy.component.move_doors({"ollama": taken, "openai": free_port()})
        assert str(taken) in refusal.value.message
        assert f"stays on port {before}" in refusal.value.message
    finally:
        holder.close()
    assert proxy.component.ports()["ollama"] == before
    assert await tags(before) == ["llama3.2:latest", "qwen2.5:latest"]


async def test_a_worker_restarted_after_a_move_serves_the_new_port(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await start_proxy(ollama=local(ollama_emulator, MODELS))
    wanted = free_port()
    await proxy.component.move_doors({"ollama": wanted})
    old_pid = proxy.component.pid()
    worker = proxy.component._worker
    assert worker is not None
    await worker.stop()  # as if it crashed: the supervisor starts another
    async with asyncio.timeout(15):
        while proxy.component.pid() in (None, old_pid):
            await asyncio.sleep(0.05)
    await proxy.wait_serving()
    assert await tags(wanted) == ["llama3.2:latest", "qwen2.5:latest"]


async def _door(client: object, door: str) -> int:
    status = await client.typed(methods.STATUS)  # type: ignore[attr-defined]
    assert isinstance(status, BrokerStatus)
    return int(status.front_doors[door].rsplit(":", 1)[1])


async def test_the_settings_rpc_moves_the_door_and_refuses_a_taken_port(
    start_broker: Callable[..., Broker],
) -> None:
    broker = start_broker()
    async with broker.connect(engine_events=False) as client:
        before = await _door(client, "openai")
        wanted = free_port()
        snapshot = await client.call(methods.SETTINGS_SET, {"values": {"openai_door_port": wanted}})
        assert snapshot["values"]["openai_door_port"] == wanted
        assert await _door(client, "openai") == wanted
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"http://127.0.0.1:{wanted}/v1/models")
        assert answer.status_code in (200, 503), "the door answers on its new port"
        assert await refused(before)

        holder = listen_tcp("127.0.0.1", 0)
        taken = int(holder.getsockname()[1])
        try:
            with pytest.raises(errors.Conflict, match=f"Port {taken} is used by another program"):
                await client.call(methods.SETTINGS_SET, {"values": {"openai_door_port": taken}})
        finally:
            holder.close()
        saved = await client.call(methods.SETTINGS_GET)
        assert saved["values"]["openai_door_port"] == wanted, "a refused port is not saved"
        assert await _door(client, "openai") == wanted

        await client.call(methods.SETTINGS_SET, {"values": {"openai_door_port": 0}})
        assert await _door(client, "openai") == before, "0: back to the port it started with"


def pair(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "backend", *args, "--data-dir", str(broker.data_dir)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


async def test_pair_settings_set_moves_the_door_and_says_why_a_port_is_refused(
    start_broker: Callable[..., Broker],
) -> None:
    broker = start_broker()
    wanted = free_port()
    moved = await asyncio.to_thread(
        pair, broker, "settings", "set", "ollama_door_port", str(wanted)
    )
    assert (moved.returncode, moved.stdout.strip()) == (0, f"ollama_door_port = {wanted}")
    assert await tags(wanted) == []  # served on the new port (no engine runs)

    holder = listen_tcp("127.0.0.1", 0)
    taken = str(holder.getsockname()[1])
    try:
        refusal = await asyncio.to_thread(
            pair, broker, "settings", "set", "ollama_door_port", taken
        )
    finally:
        holder.close()
    assert refusal.returncode == 1
    assert f"Port {taken} is used by another program" in refusal.stderr
    assert f"stays on port {wanted}" in refusal.stderr
    listed = await asyncio.to_thread(pair, broker, "settings", "list")
    assert any(
        line.split()[:2] == ["ollama_door_port", str(wanted)] for line in listed.stdout.splitlines()
    )


async def test_the_llamacpp_door_moves_and_a_door_refuses_pairs_own_port(
    start_broker: Callable[..., Broker],
) -> None:
    broker = start_broker()
    async with broker.connect(engine_events=False) as client:
        wanted = free_port()
        await client.call(methods.SETTINGS_SET, {"values": {"llamacpp_door_port": wanted}})
        assert await _door(client, "llamacpp") == wanted
        ollama = await _door(client, "ollama")
        owned = f"Port {wanted} is used by PAIR's llamacpp front door"
        with pytest.raises(errors.Conflict, match=owned):
            await client.call(methods.SETTINGS_SET, {"values": {"ollama_door_port": wanted}})
        assert await _door(client, "ollama") == ollama, "the refused door stays where it was"
        with pytest.raises(errors.InvalidParams, match="from 1024 to 65535"):
            await client.call(methods.SETTINGS_SET, {"values": {"ollama_door_port": 80}})
