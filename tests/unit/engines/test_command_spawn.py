"""The console programs the engines component runs (installers, ``lms``, version probes, a
package's first-run step) start without a console window on Windows, and exactly as before
elsewhere (the spawn itself is a fake: no process starts)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from backend.components.engines import commands, detect
from backend.components.engines.console import CREATE_NO_WINDOW, command_spawn_options
from backend.core.lifetime.windows import CREATE_NO_WINDOW as LIFETIME_CREATE_NO_WINDOW


def test_windows_gets_no_console_window() -> None:
    assert command_spawn_options("win32") == {"creationflags": 0x08000000}
    assert CREATE_NO_WINDOW == LIFETIME_CREATE_NO_WINDOW
    assert getattr(subprocess, "CREATE_NO_WINDOW", CREATE_NO_WINDOW) == CREATE_NO_WINDOW


@pytest.mark.parametrize("platform", ["linux", "darwin", "freebsd14"])
def test_posix_gets_nothing_added(platform: str) -> None:
    assert command_spawn_options(platform) == {}


def test_this_systems_options_are_the_default() -> None:
    assert command_spawn_options() == command_spawn_options(sys.platform)


def record_spawns(monkeypatch: pytest.MonkeyPatch, platform: str) -> list[dict[str, Any]]:
    spawns: list[dict[str, Any]] = []

    async def create_subprocess_exec(*argv: str, **options: Any) -> None:
        spawns.append(options)
        raise FileNotFoundError(2, "recorded, not started")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", create_subprocess_exec)
    monkeypatch.setattr(commands, "command_spawn_options", lambda: command_spawn_options(platform))
    return spawns


async def test_run_command_starts_windows_commands_without_a_console_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spawns = record_spawns(monkeypatch, "win32")

    result = await commands.run_command(["lms", "version"], timeout=5)

    assert not result.started
    assert [spawn["creationflags"] for spawn in spawns] == [CREATE_NO_WINDOW]


async def test_run_command_starts_linux_commands_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spawns = record_spawns(monkeypatch, "linux")

    await commands.run_command(["lms", "version"], timeout=5, env={"A": "1"})

    assert [sorted(spawn) for spawn in spawns] == [["env", "stderr", "stdin", "stdout"]]
    assert spawns[0]["env"]["A"] == "1"


@pytest.mark.parametrize(
    ("platform", "expected"), [("win32", {"creationflags": CREATE_NO_WINDOW}), ("linux", {})]
)
def test_a_packages_first_run_step_gets_the_same_options(
    monkeypatch: pytest.MonkeyPatch, platform: str, expected: dict[str, int]
) -> None:
    runs: list[dict[str, Any]] = []

    def run(argv: list[str], **options: Any) -> None:
        runs.append(options)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(detect, "command_spawn_options", lambda: command_spawn_options(platform))

    detect._prepare([sys.executable, "-c", "pass"])

    assert runs == [{"capture_output": True, "timeout": 60, "check": False, **expected}]
