"""One app per user and data dir: a second launch raises the running window and exits."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.single_instance import (
    InstanceServer,
    ask_running_app_to_show,
    instance_name,
    runtime_dir,
)
from tests.gui.helpers import wait_until


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # Short, as a real runtime dir is: pytest's own temp paths are too long for a socket.
    folder = Path(
        tempfile.mkdtemp(prefix="pair-run-", dir="/tmp" if sys.platform != "win32" else None)
    )
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def server(qtbot: QtBot) -> Iterator[InstanceServer]:
    instance = InstanceServer()
    yield instance
    instance.close()


def test_the_name_depends_on_the_data_dir_and_lives_in_the_runtime_dir(
    tmp_path: Path, run_dir: Path
) -> None:
    environ = {"XDG_RUNTIME_DIR": str(run_dir)}
    first = instance_name(tmp_path / "a", environ)
    assert first == instance_name(tmp_path / "a", environ)
    assert first != instance_name(tmp_path / "b", environ)
    assert Path(first).parent == run_dir


@pytest.mark.skipif(sys.platform == "win32", reason="Unix runtime folders")
def test_a_runtime_dir_too_long_for_a_socket_path_gives_way_to_a_private_one(
    tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(run_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    long_dir = run_dir / ("deep" * 30)
    long_dir.mkdir()
    name = instance_name(tmp_path / "a", {"XDG_RUNTIME_DIR": str(long_dir)})
    assert Path(name).parent.parent == run_dir, "the private folder in the temp dir"
    assert len(os.fsencode(name)) <= 107


@pytest.mark.skipif(sys.platform == "win32", reason="Unix runtime folders")
def test_without_a_runtime_dir_it_makes_a_private_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = runtime_dir({})
    assert folder.parent == tmp_path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


async def test_nobody_listening_means_no_running_app(run_dir: Path) -> None:
    assert not ask_running_app_to_show(str(run_dir / "nobody.sock"), timeout_ms=200)


async def test_a_show_request_reaches_the_running_app(
    server: InstanceServer, run_dir: Path
) -> None:
    name = str(run_dir / "app.sock")
    assert server.listen(name)
    shown: list[int] = []
    server.show_requested.connect(lambda: shown.append(1))
    # The asking side blocks briefly; the listening side answers on the loop.
    assert ask_running_app_to_show(name)
    await wait_until(lambda: shown == [1], 10.0, "the show request")


async def test_a_socket_left_by_a_crashed_app_is_replaced(
    server: InstanceServer, run_dir: Path
) -> None:
    name = run_dir / "app.sock"
    name.touch()  # a stale socket file nobody listens on
    assert server.listen(str(name)) and server.listening


async def test_a_second_app_process_raises_the_first_and_exits(
    server: InstanceServer, tmp_path: Path, run_dir: Path
) -> None:
    data_dir = tmp_path / "node"
    data_dir.mkdir()
    environ = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "QT_QPA_PLATFORM": "offscreen"}
    assert server.listen(instance_name(data_dir, environ))
    shown: list[int] = []
    server.show_requested.connect(lambda: shown.append(1))
    command = [sys.executable, "-m", "app", "--data-dir", str(data_dir)]
    second = subprocess.Popen(
        command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        await wait_until(lambda: second.poll() is not None, 60.0, "the second app to exit")
    finally:
        if second.poll() is None:
            second.kill()
        _, stderr = second.communicate()
    assert second.returncode == 0, stderr
    assert b"PAIR is already running for" in stderr
    await wait_until(lambda: shown == [1], 10.0, "the show request")
    assert not (data_dir / "broker.json").exists()  # it started nothing of its own
