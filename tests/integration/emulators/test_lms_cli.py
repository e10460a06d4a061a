"""The fake ``lms`` CLI standing in for LM Studio's, and ``pair emulate`` run as a process.

``lms server start`` leaves a detached emulator running (like LM Studio's daemon); every test
stops it by the PID the fake recorded, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import ollama
import psutil
import pytest

from backend.devtools.emulators.lms_cli import write_lms_shim
from tests.integration.conftest import ROOT, free_port

Lms = Callable[..., subprocess.CompletedProcess[str]]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def lms(tmp_path: Path) -> Iterator[Lms]:
    """Run the ``lms`` shim with a private state dir; kill any server it left, by PID."""
    shim = write_lms_shim(tmp_path / "bin")
    home = tmp_path / "lms-home"
    env = {
        **os.environ,
        "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        "PAIR_FAKE_LMS_HOME": str(home),
        "PAIR_FAKE_LMS_ARGS": "--load-delay 0.01 --token-delay 0.001",
    }

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["lms", *argv], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    yield run
    state = home / "server.json"
    pid = json.loads(state.read_text()).get("pid") if state.exists() else None
    if isinstance(pid, int) and _running(pid):
        psutil.Process(pid).kill()


def test_fake_lms_standing_in_for_lm_studio_starts_reports_and_stops_its_server(
    lms: Lms, tmp_path: Path
) -> None:
    port = free_port()
    assert lms("server", "status", "--json").stdout.strip() == '{"running": false, "port": null}'
    started = lms("server", "start", "--port", str(port))
    assert started.returncode == 0, started.stderr
    assert f"Success! Server is now running on port {port}" in started.stderr
    pid = json.loads((tmp_path / "lms-home" / "server.json").read_text())["pid"]
    assert _running(pid)
    greeting = httpx.get(f"http://127.0.0.1:{port}/lmstudio-greeting", timeout=5)
    assert greeting.json() == {"lmstudio": True}
    status = lms("server", "status", "--json")
    assert json.loads(status.stdout) == {"running": True, "port": port}
    assert f"The server is running on port {port}." in status.stderr
    stopped = lms("server", "stop")
    assert stopped.returncode == 0 and f"Stopped the server on port {port}." in stopped.stderr
    assert not _running(pid) and not _port_open(port)
    again = lms("server", "stop")
    assert (again.returncode, again.stderr.strip()) == (1, "The server is not running.")


def test_fake_lms_standing_in_for_lm_studio_loads_with_parallel_and_unloads(lms: Lms) -> None:
    port = free_port()
    assert lms("server", "start", "--port", str(port)).returncode == 0
    try:
        loaded = lms("load", "qwen2.5-7b-instruct", "--parallel", "2", "-y")
        assert loaded.returncode == 0, loaded.stderr
        assert 'use the identifier "qwen2.5-7b-instruct"' in loaded.stderr
        (instance,) = json.loads(lms("ps", "--json").stdout)
        assert (instance["identifier"], instance["parallel"]) == ("qwen2.5-7b-instruct", 2)
        models = httpx.get(f"http://127.0.0.1:{port}/api/v1/models", timeout=5).json()
        assert models["models"][0]["loaded_instances"][0]["config"]["parallel"] == 2
        missing = lms("load", "no-such-model", "-y")
        assert missing.returncode == 1 and "Model not found" in missing.stderr
        unloaded = lms("unload", "--all")
        assert unloaded.returncode == 0 and "Unloaded 1 model." in unloaded.stderr
        assert json.loads(lms("ps", "--json").stdout) == []
    finally:
        assert lms("server", "stop").returncode == 0


def test_pair_emulate_runs_the_ollama_emulator_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "emulate.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backend",
                "emulate",
                "ollama",
                "--port",
                str(port),
                "--models",
                "tinyllama,qwen2:0.5b",
                "--load-delay",
                "0",
                "--token-delay",
                "0",
            ],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "listening on" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the emulator did not start"
            time.sleep(0.05)
        client = ollama.Client(host=f"http://127.0.0.1:{port}", timeout=5)
        names = [model.model for model in client.list().models]
        assert names == ["tinyllama:latest", "qwen2:0.5b"]
        assert client.generate("qwen2:0.5b", "hi").done
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
