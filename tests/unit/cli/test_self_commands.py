"""The hidden ``pair worker NAME`` command, the app run in-process, and the development commands
of an app without the development package."""

from __future__ import annotations

import importlib.util

import pytest

import backend.workers.proxy.__main__ as proxy_main
from backend.cli import dev_only, main


def test_pair_worker_proxy_runs_the_proxy_worker_with_its_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(proxy_main, "main", lambda argv: seen.append(argv) or 7)
    code = main.main(["worker", "proxy", "--fd", "ollama=5", "--relay-fd", "8"])
    assert (code, seen) == (7, [["--fd", "ollama=5", "--relay-fd", "8"]])


def test_the_worker_command_is_left_out_of_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    main.build_parser().print_help()
    assert "worker" not in capsys.readouterr().out


def test_an_unknown_worker_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.main(["worker", "nothing"])
    assert exit_info.value.code == 2


def test_an_offscreen_qt_platform_runs_the_app_in_process_when_given_a_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    seen: list[list[str]] = []
    code = main.main(["--data-dir", "/tmp/x"], run_gui=lambda argv: seen.append(argv) or 0)
    assert (code, seen) == (0, [["--data-dir", "/tmp/x"]])


def test_without_the_development_package_dev_commands_say_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert not dev_only.devtools_present()
    assert main.main(["emulate", "ollama"]) == 1
    assert "needs a source checkout" in capsys.readouterr().err
    assert main.main(["node", "--test-worker", "healthy"]) == 2
    assert "--test-worker needs a source checkout" in capsys.readouterr().err


def test_the_development_package_is_present_in_a_checkout() -> None:
    assert dev_only.devtools_present()
