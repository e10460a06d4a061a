"""Model actions through the broker, with PAIR's Ollama and LM Studio emulators as the engines."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.devtools.emulators.lms_cli import write_lms_shim
from backend.protocol import errors
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override

StartBroker = Callable[..., Broker]


async def _action(client: Client, engine: str, action: str, model: str | None = None) -> Any:
    params = {"engine": engine, "action": action, "model": model}
    result = await client.call("engine:action", params, timeout=120)
    return result.get("names", result)  # the list actions answer names


async def test_ollama_emulator_pull_load_unload_delete_through_the_broker(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.Unavailable, match="not running"):
            await _action(client, "ollama", "list_models")
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert "tinyllama:latest" in await _action(client, "ollama", "list_models")
        await _action(client, "ollama", "pull_model", "phi3:mini")
        pushes = client.engine_events("pull_progressed")
        terminal = [p for p in pushes if p["done"]]
        assert len(terminal) == 1 and terminal[0]["stage"] == "success"
        measured = [p["percent"] for p in pushes if p["percent"] is not None and not p["done"]]
        assert measured == sorted(measured) or len(measured) > 1
        assert any(p["stage"] == "pulling manifest" and p["percent"] is None for p in pushes)
        models = await client.call("engine:models")
        assert "phi3:mini" in models["by_engine"]["ollama"]
        await _action(client, "ollama", "load_model", "phi3:mini")
        loaded = await client.call("engine:models")
        assert loaded["loaded_by_engine"]["ollama"] == ["phi3:mini"]
        assert loaded["slots_by_engine"]["ollama"] == {"phi3:mini": 1}
        await _action(client, "ollama", "unload_model", "phi3:mini")
        assert (await client.call("engine:models"))["loaded_by_engine"]["ollama"] == []
        await _action(client, "ollama", "delete_model", "phi3:mini")
        assert "phi3:mini" not in await _action(client, "ollama", "list_models")
        with pytest.raises(errors.InvalidParams, match="needs a model"):
            await _action(client, "ollama", "load_model", "")
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_a_pull_that_fails_ends_with_one_terminal_error(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        with pytest.raises(errors.InternalError, match="pull of no-such/model failed"):
            await _action(client, "ollama", "pull_model", "no-such/model")
        pushes = client.engine_events("pull_progressed")
        assert [p["stage"] for p in pushes if p["done"]] == ["error"]
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_the_watcher_notices_a_model_loaded_outside_pair(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"http://127.0.0.1:{port}/api/generate",
                json={"model": "tinyllama:latest", "prompt": ""},
            )
            assert answer.status_code == 200
        changed = await client.wait_engine_event(
            "models_changed",
            lambda m: m["loaded_by_engine"].get("ollama") == ["tinyllama:latest"],
            timeout=15,
        )
        assert "tinyllama:latest" in changed["models"]
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_engine_models_and_its_push_carry_the_sizes_ollama_lists(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client, httpx.AsyncClient() as http:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        tags = (await http.get(f"http://127.0.0.1:{port}/api/tags")).json()
        expected = {entry["name"]: entry["size"] for entry in tags["models"]}
        assert set(expected) == {"tinyllama:latest", "qwen2:0.5b"}
        assert all(isinstance(size, int) and size > 0 for size in expected.values())
        models = await client.call("engine:models")
        assert models["sizes_by_engine"]["ollama"] == expected
        answer = await http.post(
            f"http://127.0.0.1:{port}/api/generate",
            json={"model": "qwen2:0.5b", "prompt": ""},
        )
        assert answer.status_code == 200
        changed = await client.wait_engine_event(
            "models_changed",
            lambda m: m["loaded_by_engine"].get("ollama") == ["qwen2:0.5b"],
            timeout=15,
        )
        assert changed["sizes_by_engine"]["ollama"] == expected
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


@pytest.fixture
def lmstudio_node(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A data dir whose LM Studio is the fake ``lms`` driving the emulator: (data dir, models)."""
    data_dir = tmp_path / "node-lms"
    shim = write_lms_shim(tmp_path / "lms-bin")
    models_dir = tmp_path / "lms-models"
    models_dir.mkdir()
    write_override(
        data_dir,
        "lmstudio",
        {
            "detect": [{"path": str(shim)}],
            "models_dir": str(models_dir),
            "runtime": {"port": free_port(), "ready": {"timeout_s": 30}},
        },
    )
    old_home = os.environ.get("PAIR_FAKE_LMS_HOME")
    os.environ["PAIR_FAKE_LMS_HOME"] = str(tmp_path / "lms-home")
    yield data_dir, models_dir
    if old_home is None:
        os.environ.pop("PAIR_FAKE_LMS_HOME", None)
    else:
        os.environ["PAIR_FAKE_LMS_HOME"] = old_home


async def test_lmstudio_command_mode_start_models_slots_delete_restart_stop(
    start_broker: StartBroker, lmstudio_node: tuple[Path, Path]
) -> None:
    data_dir, models_dir = lmstudio_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "lmstudio"}, timeout=60)
        assert (status["state"], status["mode"], status["adopted"]) == ("running", "command", False)
        names = await _action(client, "lmstudio", "list_models")
        model = names[0]
        await _action(client, "lmstudio", "load_model", model)
        models = await client.call("engine:models")
        assert models["loaded_by_engine"]["lmstudio"] == [model]
        assert models["slots_by_engine"]["lmstudio"] == {model: 4}, "LM Studio's default parallel"
        assert models["sizes_by_engine"]["lmstudio"][model] > 0, "from size_bytes"
        await _action(client, "lmstudio", "pull_model", "qwen/qwen3-4b")
        pulled = [p for p in client.engine_events("pull_progressed") if p["done"]]
        assert pulled[-1]["error"] is None
        (models_dir / "publisher" / "doomed").mkdir(parents=True)
        (models_dir / "publisher" / "doomed" / "w.gguf").write_bytes(b"x")
        result = await _action(client, "lmstudio", "delete_model", "publisher/doomed")
        assert result == {"ok": True, "restarted": True}
        assert not (models_dir / "publisher" / "doomed").exists()
        assert models_dir.exists(), "the model store itself is never removed"
        with pytest.raises(errors.InvalidParams, match="not inside"):
            await _action(client, "lmstudio", "delete_model", "../escape")
        assert (await client.call("engine:status", {"engine": "lmstudio"}))["state"] == "running"
        stopped = await client.call("engine:stop", {"engine": "lmstudio"}, timeout=60)
        assert stopped["state"] == "stopped"
        port = stopped["port"]
        async with httpx.AsyncClient() as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"http://127.0.0.1:{port}/lmstudio-greeting", timeout=2)


async def test_an_engine_crash_during_a_pull_fails_the_pull_once_and_the_engine_returns(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
        pull = asyncio.create_task(_action(client, "ollama", "pull_model", "phi3:mini"))
        await client.wait_engine_event("pull_progressed", lambda p: p["percent"] is not None)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(errors.InternalError, match="pull of phi3:mini failed"):
            await pull
        terminal = [p for p in client.engine_events("pull_progressed") if p["done"]]
        assert len(terminal) == 1 and terminal[0]["stage"] == "error"
        await client.wait_engine_event(
            "state_changed",
            lambda s: s["engine"] == "ollama" and s["state"] == "running" and s["pid"] != pid,
            timeout=30,
        )
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)
