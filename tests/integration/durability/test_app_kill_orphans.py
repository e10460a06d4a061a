"""kill -9 of the desktop app: the broker it started notices, stops the engines it started and
exits, so no engine process is left 10 s later."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.integration.conftest import ROOT, Broker, free_port

GONE_WITHIN_S = 10.0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start_app(data_dir: Path, home: Path, log: Path) -> subprocess.Popen[bytes]:
    """The real app, offscreen, with every port free and its preferences in ``home``."""
    ports = [
        (flag, str(free_port()))
        for flag in ("--node-port", "--ollama-port", "--openai-port", "--llamacpp-port")
    ]
    argv = [sys.executable, "-m", "app", "--data-dir", str(data_dir), "--json-logs"]
    argv += [part for pair in ports for part in pair]
    environment = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
    }
    with log.open("wb") as output:
        return subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=output, stderr=output, env=environment
        )


async def _wait_for_broker(app: subprocess.Popen[bytes], broker: Broker, log: Path) -> None:
    """Until the app's broker says ``app:ready`` (its components started): its control socket
    answers before that, when the engine manager may not run yet."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert app.poll() is None, _tail(log)
        try:
            async with broker.connect(engine_events=False) as client:
                await client.wait_push("app:ready", timeout=max(0.1, deadline - time.monotonic()))
                return
        except OSError:
            await asyncio.sleep(0.1)
        except TimeoutError:
            break
    raise AssertionError(f"the app's broker was not ready within 60 s: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def _clean_stop_recorded(data_dir: Path, pid: int) -> bool:
    with contextlib.closing(sqlite3.connect(data_dir / "pair.db")) as db:
        rows = db.execute("SELECT stopped_at FROM broker_runs WHERE pid = ?", (pid,)).fetchall()
    return bool(rows) and rows[-1][0] is not None


async def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        await asyncio.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


async def test_killing_the_app_stops_its_broker_and_the_engines_it_started(
    tmp_path: Path, paced_ollama_node: Path
) -> None:
    data_dir, log = paced_ollama_node, tmp_path / "app.out"
    app = _start_app(data_dir, tmp_path / "home", log)
    # The broker's process is the app's child: this handle only reaches its control socket.
    broker = Broker(app, data_dir, log)
    pids: list[int] = []
    try:
        await _wait_for_broker(app, broker, log)
        async with broker.connect(engine_events=False) as client:
            engine = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
            status = await client.call("status")
        pids = [status["pid"], engine["pid"]]
        assert engine["adopted"] is False and _alive(engine["pid"])
        killed_at = time.monotonic()
        os.kill(app.pid, signal.SIGKILL)
        app.wait(10)
        left = await _wait_gone(pids)
        print(f"\napp kill: broker and engine gone after {time.monotonic() - killed_at:.1f} s")
        assert left == [], f"still running {GONE_WITHIN_S} s after the app was killed: {left}"
        assert _clean_stop_recorded(data_dir, status["pid"]), "the broker did not shut down"
    finally:
        for pid in pids:  # processes this test caused, by PID, if the product left them
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if app.poll() is None:
            app.kill()
            app.wait(10)
