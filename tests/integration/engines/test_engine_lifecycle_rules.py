"""Lifecycle rules in a real broker: LM Studio's stop (the fake ``lms``) that fails leaves it
running and says why; an adopted engine stopped outside PAIR is let go by its closed port."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backend.devtools.emulators.lms_cli import write_lms_shim
from backend.protocol import errors
from tests.integration.conftest import ROOT, Broker, Client, free_port
from tests.integration.engines.conftest import write_override

StartBroker = Callable[..., Broker]
FAILING_STOP = [sys.executable, "-c", "import sys; print('no server to stop'); sys.exit(1)"]


@pytest.fixture
def stubborn_lmstudio(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A data dir whose LM Studio is the fake ``lms``, with a stop command that fails and
    leaves the server running: (data dir, the ``lms`` shim)."""
    data_dir = tmp_path / "node-lms"
    shim = write_lms_shim(tmp_path / "lms-bin")
    write_override(
        data_dir,
        "lmstudio",
        {
            "detect": [{"path": str(shim)}],
            "runtime": {
                "port": free_port(),
                "ready": {"timeout_s": 30},
                "stop": {"cmd": FAILING_STOP, "grace_s": 1},
            },
        },
    )
    home = tmp_path / "lms-home"
    old_home = os.environ.get("PAIR_FAKE_LMS_HOME")
    os.environ["PAIR_FAKE_LMS_HOME"] = str(home)
    try:
        yield data_dir, shim
    finally:
        # The emulator the fake started (and only it, by the PID it recorded).
        subprocess.run([str(shim), "server", "stop"], capture_output=True, timeout=30)
        if old_home is None:
            os.environ.pop("PAIR_FAKE_LMS_HOME", None)
        else:
            os.environ["PAIR_FAKE_LMS_HOME"] = old_home


async def test_a_failed_lmstudio_stop_says_why_and_keeps_watching_it(
    start_broker: StartBroker, stubborn_lmstudio: tuple[Path, Path]
) -> None:
    data_dir, shim = stubborn_lmstudio
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        started = await client.call("engine:start", {"engine": "lmstudio"}, timeout=60)
        assert (started["state"], started["mode"]) == ("running", "command")
        with pytest.raises(errors.InternalError) as failed:
            await client.call("engine:stop", {"engine": "lmstudio"}, timeout=60)
        assert "LM Studio did not stop" in failed.value.message
        assert "exited with 1: no server to stop" in failed.value.message
        assert "keeps running and PAIR watches it again" in failed.value.message
        status = await client.call("engine:status", {"engine": "lmstudio"})
        assert (status["state"], status["desired"]) == ("running", False)
        with pytest.raises(errors.InternalError, match="did not stop"):
            await client.call("engine:prepare-shutdown", timeout=60)
        stopped = subprocess.run([str(shim), "server", "stop"], capture_output=True, timeout=30)
        assert stopped.returncode == 0, stopped.stderr


async def test_an_adopted_engine_stopped_outside_pair_is_let_go(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    # Health probes a minute apart: only the closed port can tell PAIR it is gone.
    override = {"runtime": {"port": port, "health": {"interval_s": 60}}}
    write_override(data_dir, "ollama", {**_override(data_dir), **override})
    outsider = subprocess.Popen(
        [sys.executable, "-m", "backend", "emulate", "ollama", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        broker = start_broker(data_dir=data_dir)
        async with broker.connect() as client:
            status = await _adopt(client)
            assert status["adopted"] is True
            outsider.terminate()
            outsider.wait(10)
            gone = await client.wait_engine_event(
                "state_changed",
                lambda s: s["engine"] == "ollama" and s["state"] == "stopped",
                timeout=30,
            )
            assert (gone["adopted"], gone["error"]) == (False, None)
    finally:
        if outsider.poll() is None:
            outsider.terminate()
            outsider.wait(10)


def _override(data_dir: Path) -> dict[str, object]:
    document: dict[str, object] = json.loads((data_dir / "engines" / "ollama.json").read_text())
    return document


async def _adopt(client: Client) -> dict[str, object]:
    """Start (adopt) Ollama once the outsider answers."""
    for _ in range(100):
        status: dict[str, object] = await client.call(
            "engine:start", {"engine": "ollama"}, timeout=60
        )
        if status["adopted"]:
            return status
        await client.call("engine:stop", {"engine": "ollama"})
        await asyncio.sleep(0.1)
    raise AssertionError("the outside Ollama never answered")
