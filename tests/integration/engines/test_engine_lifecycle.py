"""Engine lifecycle in a real broker, with the Ollama emulator standing in for Ollama."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from backend.protocol import errors
from tests.integration.conftest import ROOT, Broker, Client
from tests.integration.engines.conftest import SILENT_SHIM, write_override, write_script

StartBroker = Callable[..., Broker]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _status(client: Client, engine: str = "ollama") -> dict[str, Any]:
    return await client.call("engine:status", {"engine": engine})  # type: ignore[no-any-return]


async def _wait_status(
    client: Client, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    return await client.wait_engine_event(  # type: ignore[no-any-return]
        "state_changed", lambda s: s["engine"] == "ollama" and predicate(s), timeout
    )


async def test_emulated_ollama_starts_owned_with_slots_and_stops(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert (status["state"], status["adopted"], status["port"]) == ("running", False, port)
        assert status["slots"] == 1, "OLLAMA_NUM_PARALLEL unset: one slot"
        pid = status["pid"]
        assert _alive(pid)
        assert os.getpgid(pid) == pid, "engines run in their own process group"
        logs = await client.call("engine:logs", {"engine": "ollama"})
        assert any("starting" in line for line in logs["lines"])
        stopped = await client.call("engine:stop", {"engine": "ollama"}, timeout=30)
        assert stopped["state"] == "stopped" and stopped["desired"] is False
        assert not _alive(pid)


async def test_slots_follow_ollama_num_parallel_of_an_engine_pair_started(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    override = json.loads((data_dir / "engines" / "ollama.json").read_text())
    override["runtime"]["env"] = {"OLLAMA_HOST": "{host}:{port}", "OLLAMA_NUM_PARALLEL": "3"}
    write_override(data_dir, "ollama", override)
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        status = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        assert status["slots"] == 3
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_desired_state_survives_a_broker_restart_and_engines_stop_with_the_broker(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    first = start_broker(data_dir=data_dir)
    async with first.connect() as client:
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
    assert first.stop() == 0
    assert not _alive(pid), "prepare-shutdown stops engines PAIR started"
    second = start_broker(data_dir=data_dir)
    async with second.connect() as client:
        status = await _status(client)
        if status["state"] != "running":
            status = await _wait_status(client, lambda s: s["state"] == "running")
        assert status["desired"] is True and status["pid"] not in (None, pid)
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_an_engine_already_running_is_adopted_and_never_stopped(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    outsider = subprocess.Popen(
        [sys.executable, "-m", "backend", "emulate", "ollama", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        broker = start_broker(data_dir=data_dir)
        async with broker.connect() as client:
            for _ in range(100):
                if (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["adopted"]:
                    break
                await client.call("engine:stop", {"engine": "ollama"})
                await asyncio.sleep(0.1)
            status = await _status(client)
            assert status["adopted"] is True and status["pid"] is None
            with pytest.raises(errors.Conflict, match="not started by PAIR"):
                await client.call("engine:stop", {"engine": "ollama"})
            assert (await _status(client))["desired"] is False, "the intent is still saved"
            with pytest.raises(errors.Conflict):
                await client.call("engine:set-port", {"engine": "ollama", "port": port + 1})
        broker.stop()
        assert outsider.poll() is None, "PAIR must never stop a process it did not start"
    finally:
        outsider.terminate()
        outsider.wait(10)


async def test_a_foreign_listener_on_the_port_is_refused_and_left_alone(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        broker = start_broker(data_dir=data_dir)
        async with broker.connect() as client:
            with pytest.raises(errors.Conflict, match=f"port {port} is in use by another"):
                await client.call("engine:start", {"engine": "ollama"}, timeout=30)
            assert (await _status(client))["state"] == "error"


async def test_a_killed_engine_is_reported_and_restarted_because_it_is_wanted(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
        os.kill(pid, signal.SIGKILL)
        raised = await client.wait_push(
            "errors:update", lambda es: any(e["id"] == "engine:crashed:ollama" for e in es)
        )
        entry = next(e for e in raised if e["id"] == "engine:crashed:ollama")
        assert "exited with code -9" in entry["message"] and "restarting in 1 s" in entry["message"]
        back = await _wait_status(client, lambda s: s["state"] == "running" and s["pid"] != pid)
        assert back["desired"] is True
        await client.wait_push(
            "errors:update", lambda es: not any(e["id"] == "engine:crashed:ollama" for e in es)
        )
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_set_port_moves_a_running_engine_and_persists_the_override(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = taken.getsockname()[1]
            with pytest.raises(errors.Conflict, match=f"port {busy} is already in use"):
                await client.call("engine:set-port", {"engine": "ollama", "port": busy})
        with pytest.raises(errors.InvalidParams):
            await client.call("engine:set-port", {"engine": "ollama", "port": 70000})
        new_port = port + 7 if port < 60000 else port - 7
        moved = await client.call(
            "engine:set-port", {"engine": "ollama", "port": new_port}, timeout=60
        )
        assert (moved["state"], moved["port"]) == ("running", new_port)
        override = json.loads((data_dir / "engines" / "ollama.json").read_text())
        assert override["runtime"]["port"] == new_port
        assert override["detect"], "the rest of the override is kept"
        same = await client.call("engine:set-port", {"engine": "ollama", "port": new_port})
        assert (same["state"], same["pid"]) == ("running", moved["pid"])  # no restart
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)


async def test_missing_binary_and_readiness_timeout_fail_clearly(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node-bad"
    silent = write_script(tmp_path / "silent-engine", SILENT_SHIM)
    from tests.integration.conftest import free_port

    write_override(
        data_dir,
        "ollama",
        {"detect": [{"path": str(tmp_path / "nope")}], "runtime": {"port": free_port()}},
    )
    write_override(
        data_dir,
        "llamacpp",
        {
            "detect": [{"path": str(silent)}],
            # A plain process: no model store to pick a model from, so the start gets as far
            # as waiting for readiness.
            "model_store": None,
            "runtime": {"port": free_port(), "ready": {"timeout_s": 1.5}, "args": []},
        },
    )
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        with pytest.raises(errors.NotFound, match="Ollama is not installed"):
            await client.call("engine:start", {"engine": "ollama"})
        with pytest.raises(errors.InternalError, match=r"not ready within 1\.5 s"):
            await client.call("engine:start", {"engine": "llamacpp"}, timeout=30)
        status = await _status(client, "llamacpp")
        assert status["state"] == "error" and status["pid"] is None
        leftovers = [
            p
            for p in psutil.process_iter(["cmdline"])
            if str(silent) in " ".join(p.info["cmdline"] or [])
        ]
        assert leftovers == [], "a start that failed must not leave its process behind"


async def test_broken_overrides_are_reported_and_the_bundled_manifest_kept(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    data_dir = tmp_path / "node-overrides"
    (data_dir / "engines").mkdir(parents=True)
    (data_dir / "engines" / "ollama.json").write_text("{ not json")
    write_override(data_dir, "lmstudio", {"runtime": {"bind": "0.0.0.0"}})
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        entries = {e["id"]: e for e in await client.call("errors:get-initial")}
        assert "not readable JSON" in entries["engine:manifest:ollama"]["message"]
        assert "loopback" in entries["engine:manifest:lmstudio"]["message"]
        assert (await _status(client, "ollama"))["port"] == 11435
        assert (await _status(client, "lmstudio"))["port"] == 1235


async def test_engines_never_outlive_a_killed_broker(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        pid = (await client.call("engine:start", {"engine": "ollama"}, timeout=60))["pid"]
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)
    for _ in range(100):
        if not _alive(pid):
            break
        await asyncio.sleep(0.1)
    assert not _alive(pid), "the engine must die with the broker (parent-death signal)"


async def test_status_answers_during_a_slow_start_and_shutdown_sweeps_join(
    start_broker: StartBroker, ollama_node: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, _ = ollama_node
    monkeypatch.setenv("PAIR_TEST_START_DELAY", "3")
    broker = start_broker(data_dir=data_dir)
    async with broker.connect() as client:
        starting = asyncio.create_task(
            client.call("engine:start", {"engine": "ollama"}, timeout=60)
        )
        await _wait_status(client, lambda s: s["state"] == "starting")
        status = await _status(client)
        assert status["state"] == "starting"
        assert not starting.done(), "status must not wait for the lifecycle lock"
        assert (await starting)["state"] == "running"
        sweeps = await asyncio.gather(
            client.call("engine:prepare-shutdown", timeout=30),
            client.call("engine:prepare-shutdown", timeout=30),
        )
        assert sweeps == [{"ok": True}, {"ok": True}]
        after = await _status(client)
        assert (after["state"], after["desired"]) == ("stopped", True)
        starts = [
            line
            for line in (await client.call("engine:logs", {"engine": "ollama"}))["lines"]
            if "starting" in line
        ]
        assert len(starts) == 1
