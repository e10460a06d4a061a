"""`pair engines`, `pair engine start|stop`, `pair models`, `pair pull` (Ollama emulator)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import ROOT, Broker

StartBroker = Callable[..., Broker]


def _pair(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backend", *args, "--data-dir", str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_engine_commands_drive_the_broker(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    start_broker(data_dir=data_dir)
    listed = _pair(data_dir, "engines")
    assert listed.returncode == 0, listed.stderr
    assert "ollama" in listed.stdout and "lmstudio" in listed.stdout
    started = _pair(data_dir, "engine", "start", "ollama")
    assert started.returncode == 0, started.stderr
    assert f"Ollama: running on port {port}" in started.stdout
    pulled = _pair(data_dir, "pull", "ollama", "phi3:mini")
    assert pulled.returncode == 0, pulled.stderr
    assert "100.0%" in pulled.stdout and "phi3:mini is ready in ollama" in pulled.stdout
    models = _pair(data_dir, "models")
    assert "phi3:mini" in models.stdout
    missing = _pair(data_dir, "engine", "start", "nope")
    assert missing.returncode == 1 and "no engine named 'nope'" in missing.stderr
    stopped = _pair(data_dir, "engine", "stop", "ollama")
    assert "Ollama: stopped" in stopped.stdout
