"""How ``pair`` without a command starts the desktop app: exec on POSIX, a child on Windows."""

from __future__ import annotations

import os
import sys

import pytest

from backend.cli.commands import _exec_gui


def test_windows_runs_the_app_as_a_child_and_returns_its_exit_code() -> None:
    called: list[list[str]] = []

    def call(command: list[str]) -> int:
        called.append(command)
        return 7

    assert _exec_gui(["--data-dir", "D:\\n"], None, sys_platform="win32", call=call) == 7
    assert called == [[sys.executable, "-m", "app", "--data-dir", "D:\\n"]]


class Replaced(Exception):
    """Raised by the fake ``execv``: the real one never returns."""


def test_posix_replaces_this_process_with_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    execs: list[tuple[str, list[str]]] = []

    def execv(path: str, argv: list[str]) -> None:
        execs.append((path, argv))
        raise Replaced

    def call(command: list[str]) -> int:
        raise AssertionError("POSIX starts no child")

    monkeypatch.setattr(os, "execv", execv)
    with pytest.raises(Replaced):
        _exec_gui(["--x"], None, sys_platform="linux", call=call)
    assert execs == [(sys.executable, [sys.executable, "-m", "app", "--x"])]


def test_a_given_gui_runner_is_used_on_every_platform() -> None:
    def call(command: list[str]) -> int:
        raise AssertionError("the runner starts the app")

    for platform in ("win32", "darwin", "linux"):
        assert _exec_gui(["--y"], lambda argv: len(argv), sys_platform=platform, call=call) == 1
