"""Engines for broker tests: shims that run PAIR's engine emulators as if they were the engines.

The Ollama shim stands in for the ``ollama`` binary: it reads ``OLLAMA_HOST`` and
``OLLAMA_NUM_PARALLEL`` exactly as Ollama does and serves the Ollama emulator there.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.conftest import free_port, serve_folder

OLLAMA_SHIM = """#!{python}
import os, sys, time
time.sleep(float(os.environ.get("PAIR_TEST_START_DELAY", "0")))  # a slow engine start
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--models", os.environ.get("PAIR_TEST_MODELS", "tinyllama:latest,qwen2:0.5b"),
        "--parallel", os.environ.get("OLLAMA_NUM_PARALLEL", "1")]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""

SILENT_SHIM = """#!{python}
import time
time.sleep(3600)  # an engine that starts but never becomes ready
"""


def engine_key_headers(port: int) -> dict[str, str]:
    """The ``Authorization`` PAIR sends the llama-server listening on ``port`` (the key it
    launched it with, from its environment); none for a server PAIR did not launch."""
    for connection in psutil.net_connections("tcp"):
        if connection.status == psutil.CONN_LISTEN and getattr(connection.laddr, "port", 0) == port:
            if connection.pid is None:
                break
            key = psutil.Process(connection.pid).environ().get("LLAMA_API_KEY")
            return {"Authorization": f"Bearer {key}"} if key else {}
    return {}


def write_script(path: Path, text: str) -> Path:
    """An executable script run by this test's Python."""
    path.write_text(text.replace("{python}", sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def write_override(data_dir: Path, engine: str, document: dict[str, Any]) -> Path:
    """A user override for ``engine`` in the node's data dir."""
    folder = data_dir / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{engine}.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def ollama_node(tmp_path: Path) -> tuple[Path, int]:
    """A data dir whose ``ollama`` is the emulator shim on a free port: (data dir, port)."""
    data_dir = tmp_path / "node-ollama"
    shim = write_script(tmp_path / "ollama", OLLAMA_SHIM)
    port = free_port()
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": str(shim)}],
            "runtime": {"port": port, "ready": {"timeout_s": 30}, "health": {"interval_s": 0.5}},
        },
    )
    return data_dir, port


@pytest.fixture
def served_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A plain HTTP server of a fresh folder, standing in for a download site: (folder, URL)."""
    folder = tmp_path / "www"
    folder.mkdir()
    with serve_folder(folder) as url:
        yield folder, url
