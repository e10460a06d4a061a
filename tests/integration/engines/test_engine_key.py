"""The llama-server PAIR launches answers PAIR only: it runs with a random API key (from the
environment, so ``ps`` does not show it), which PAIR's broker and doors send and nobody else
knows. A client (or a web page) that goes to the engine's port around the door gets 401; the
door serves as before; ``/health`` stays open for probes. The key is in no log and no file."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from tests.integration.conftest import Broker
from tests.integration.engines.test_llamacpp_engine import _node
from tests.support.ports import free_port

pytest_plugins = ["tests.engines.fixtures"]

StartBroker = Callable[..., Broker]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def _served_through(door: httpx.AsyncClient) -> httpx.Response:
    async with asyncio.timeout(30):  # until the worker has the table with the engine
        while (answer := await door.post("/v1/chat/completions", json=CHAT)).is_error:
            assert answer.status_code in (404, 503), answer.text
            await asyncio.sleep(0.1)
    return answer


def _files_holding(folder: Path, secret: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes()]


async def test_the_engine_pair_launches_answers_only_pair(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    data_dir, port, door_port = tmp_path / "node", free_port(), free_port()
    _node(data_dir, llama_server_binary, port, {"tiny": tiny_model_path})
    broker = start_broker("--llamacpp-port", str(door_port), data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "llamacpp"}, timeout=120)
        assert status["slots"] == 2, "the broker reads the engine's slots with its key"
        process = psutil.Process(status["pid"])
        key = process.environ().get("LLAMA_API_KEY", "")
        assert len(key) >= 32, "launched with a random key"
        assert not [arg for arg in process.cmdline() if key in arg], "the key is not in argv"
        engine = f"http://127.0.0.1:{port}"
        async with (
            httpx.AsyncClient(base_url=engine) as direct,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{door_port}") as door,
        ):
            assert (await direct.get("/health")).status_code == 200
            assert (await direct.post("/v1/chat/completions", json=CHAT)).status_code == 401
            web_page = {"Origin": "http://evil.example"}
            around = await direct.post("/v1/chat/completions", json=CHAT, headers=web_page)
            assert around.status_code == 401
            assert (await direct.get("/slots")).status_code == 401
            assert (await _served_through(door)).json()["choices"]
            # The client's own credentials never replace PAIR's key.
            theirs = {"Authorization": "Bearer sk-not-pairs"}
            assert (await door.post("/v1/chat/completions", json=CHAT, headers=theirs)).is_success
            assert (await door.get("/slots")).status_code == 200, "pass-through sends the key"
            listed = (await door.get("/v1/models")).json()
            assert "tiny" in [entry["id"] for entry in listed["data"]]
        loaded = (await client.call("engine:models"))["loaded_by_engine"]["llamacpp"]
        assert loaded == ["tiny"], "the broker's own requests carry the key"
        await client.call("engine:stop", {"engine": "llamacpp"}, timeout=60)
    broker.stop()
    secret = key.encode()
    assert secret not in broker.stderr_path.read_bytes(), "the key is in no log"
    assert _files_holding(data_dir, secret) == [], "nor in any file of the data dir"
