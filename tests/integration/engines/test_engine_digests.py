"""A broker reports each model's weights digest: llama.cpp's store file hashed, Ollama's weights
blob from its Modelfile; the same GGUF in both has one digest, in ``engine:models``, its push
and node-info."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backend.devtools.tiny_model import write_model
from tests.integration.conftest import Broker, Client, free_port
from tests.integration.engines.conftest import write_override, write_script

StartBroker = Callable[..., Broker]

# The Ollama shim of ``conftest.py``, whose emulator also says which weights its models are.
OLLAMA_WEIGHTS_SHIM = """#!{python}
import os, sys
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--models", "tinyllama:latest,qwen2:0.5b",
        "--weights", os.environ["PAIR_TEST_WEIGHTS"]]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""


async def _models_when(client: Client, done: Callable[[Any], bool]) -> Any:
    """``engine:models`` once ``done`` holds (digests follow the lists within moments)."""
    async with asyncio.timeout(30):
        while not done(models := await client.call("engine:models")):
            await asyncio.sleep(0.1)
    return models


async def test_the_same_gguf_in_ollama_and_the_llamacpp_store_has_one_digest(
    start_broker: StartBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "node"
    (data_dir / "models" / "llamacpp").mkdir(parents=True)
    gguf = write_model(data_dir / "models" / "llamacpp" / "tiny.gguf")
    digest = "sha256:" + hashlib.sha256(gguf.read_bytes()).hexdigest()
    (data_dir / "models" / "llamacpp" / "half.gguf.part").write_bytes(b"GGUF pulling")
    monkeypatch.setenv("PAIR_TEST_WEIGHTS", f"tinyllama={digest}")
    shim = write_script(tmp_path / "ollama", OLLAMA_WEIGHTS_SHIM)
    runtime = {"port": free_port(), "ready": {"timeout_s": 30}, "health": {"interval_s": 0.5}}
    write_override(data_dir, "ollama", {"detect": [{"path": str(shim)}], "runtime": runtime})
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        models = await _models_when(
            client, lambda m: len(m.get("digests_by_engine", {}).get("ollama", {})) == 2
        )
        digests = models["digests_by_engine"]
        assert digests["ollama"]["tinyllama:latest"] == digest == digests["llamacpp"]["tiny"]
        assert digests["ollama"]["qwen2:0.5b"] not in (digest, None)
        assert list(digests["llamacpp"]) == ["tiny"]  # the file being pulled is not hashed
        # The push that carries them may reach this client a moment after the call's answer.
        pushed = await client.wait_engine_event(
            "models_changed", lambda m: m.get("digests_by_engine") == digests
        )
        assert pushed["digests_by_engine"] == digests
        info = await client.call("nodeinfo:get")
        ollama = info["engines"]["ollama"]
        assert ollama["digests"] == digests["ollama"]
        assert ollama["sizes"] == models["sizes_by_engine"]["ollama"]
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)
    cache = (data_dir / "models" / "digests.json").read_text()
    assert digest in cache and "half.gguf.part" not in cache
