"""The banner ``pair node`` prints once it is up names the node API's port only while the node
API listens; with its port taken by another program it says the node API failed, and why. The
front doors come in the app's order: Ollama, OpenAI, llama.cpp."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.integration.conftest import ROOT, node_argv
from tests.support.ports import free_port

BANNER_END = "Stop with Ctrl+C"


def banner_of(data_dir: Path, node_port: int, out: Path) -> str:
    """Start a node on ``node_port``, read its banner, stop it."""
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            node_argv(data_dir, "--node-port", str(node_port)),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 90
        while BANNER_END not in out.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, "the node ended before its banner"
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    return out.read_text()


def line_of(banner: str, title: str) -> str:
    return next(line for line in banner.splitlines() if line.strip().startswith(title))


def test_the_banner_says_the_node_api_failed_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = line_of(banner_of(tmp_path / "node", port, tmp_path / "taken.out"), "node API")
    assert line.split(None, 2)[2].startswith(f"FAILED on port {port}: ")
    assert "on every address" not in line


def test_the_banner_names_the_port_the_node_api_listens_on(tmp_path: Path) -> None:
    port = free_port()
    banner = banner_of(tmp_path / "node", port, tmp_path / "free.out")
    assert line_of(banner, "node API").split(None, 2)[2].startswith(f"port {port} on every address")
    doors = line_of(banner, "front doors").split(None, 2)[2]
    assert [door.split()[0] for door in doors.split(", ")] == ["ollama", "openai", "llamacpp"]
