"""One model is one model: the same weights in Ollama (the emulator, given the GGUF's digest as
its model's weights) and in llama.cpp's model store (a real llama-server) are ONE model at
every front door, and a request for either name is served by either engine.

A real broker: it reads each engine's weights digests (Ollama's model layer, the sha256 of the
GGUF) into the routing table; the proxy worker lists the pair once and sends each engine the
request under its own name (``routing/identity.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai

from backend.protocol import methods
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override, write_script

pytest_plugins = ["tests.engines.fixtures"]

StartBroker = Callable[..., Broker]
OLLAMA_NAME = "qwen2.5:7b"
GGUF_NAME = "qwen-tiny"  # llama.cpp names a stored model by its file's stem
HELLO: Any = [{"role": "user", "content": "hello"}]
# The Ollama emulator, its one model given the GGUF's weights digest.
SHIM = """#!{python}
import os, sys
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--models", "{model}", "--weights", "{model}={digest}", "--parallel", "2"]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""


def _node(tmp_path: Path, binary: Path, gguf: Path) -> Path:
    """A data dir whose Ollama is the emulator and whose llama.cpp store holds ``gguf``."""
    data_dir = tmp_path / "node"
    digest = "sha256:" + hashlib.sha256(gguf.read_bytes()).hexdigest()
    text = SHIM.replace("{model}", OLLAMA_NAME).replace("{digest}", digest)
    shim = write_script(tmp_path / "ollama", text)
    ready = {"ready": {"timeout_s": 30}, "health": {"interval_s": 0.5}}
    write_override(
        data_dir,
        "ollama",
        {"detect": [{"path": str(shim)}], "runtime": {"port": free_port(), **ready}},
    )
    write_override(
        data_dir,
        "llamacpp",
        {"detect": [{"path": str(binary)}], "runtime": {"port": free_port(), **ready}},
    )
    (data_dir / "settings.json").write_text(json.dumps({"llamacpp_parallel": 2}))
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True)
    (store / f"{GGUF_NAME}.gguf").symlink_to(gguf)
    return data_dir


async def _doors(client: Client) -> dict[str, str]:
    for engine in ("ollama", "llamacpp"):
        status = await client.call(methods.ENGINE_START, {"engine": engine}, timeout=120)
        assert status["state"] == "running", status
    return dict((await client.typed(methods.STATUS)).front_doors)


async def _listed_once(door: str, name: str) -> list[str]:
    """``/v1/models`` once the door lists the model once, as ``name`` (both engines list it
    and the digests are in the table)."""
    ids: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=door) as http, asyncio.timeout(60):
            while {OLLAMA_NAME, GGUF_NAME} & set(ids) != {name}:
                await asyncio.sleep(0.2)
                ids = [entry["id"] for entry in (await http.get("/v1/models")).json()["data"]]
    except TimeoutError:
        raise AssertionError(f"{door} lists {ids}, not {name} alone") from None
    return ids


async def _served_by_llama_server(door: str, model: str) -> bool:
    """Whether llama-server answered (its answers carry ``timings``; Ollama's do not)."""
    async with openai.AsyncOpenAI(base_url=door + "/v1", api_key="x", max_retries=0) as client:
        answer = await client.chat.completions.create(model=model, messages=HELLO, max_tokens=4)
    assert answer.choices[0].message.content is not None, model
    return "timings" in (answer.model_extra or {})


async def test_the_same_weights_in_ollama_and_llamacpp_are_one_model_served_by_either(
    start_broker: StartBroker, tmp_path: Path, llama_server_binary: Path, tiny_model_path: Path
) -> None:
    broker = start_broker(data_dir=_node(tmp_path, llama_server_binary, tiny_model_path))
    async with broker.connect() as client:
        doors = await _doors(client)
    # Listed once, under the name the door's own engine family gives it.
    await _listed_once(doors["llamacpp"], GGUF_NAME)
    await _listed_once(doors["ollama"], OLLAMA_NAME)
    tags = await ollama.AsyncClient(host=doors["ollama"]).list()
    assert [entry.model for entry in tags.models] == [OLLAMA_NAME]
    # Either name is shown, by the engine that has it under its own name.
    for name in (OLLAMA_NAME, GGUF_NAME):
        shown = await ollama.AsyncClient(host=doors["ollama"]).show(name)
        assert shown.details is not None, name
    # Either engine serves either name (an ``engine/`` pin picks the engine).
    door = doors["openai"]
    for name in (OLLAMA_NAME, GGUF_NAME):
        assert not await _served_by_llama_server(door, f"ollama/{name}"), name
    # llama-server holds one model at a time: its scheduler must be asked for its own name.
    for name in (OLLAMA_NAME, GGUF_NAME):
        assert await _served_by_llama_server(door, f"llamacpp/{name}"), name
