"""Start at login: the XDG entry for real in a temp config home, the LaunchAgent and the Windows
Run value by their contents (file location and registry injected)."""

from __future__ import annotations

import configparser
import plistlib
import shlex
import stat
import sys
from pathlib import Path

import pytest

from app import autostart
from app.autostart import (
    LAUNCH_AGENT_LABEL,
    RUN_VALUE_NAME,
    RegistryAutostart,
    desktop_entry,
    exec_argument,
    launch_agent_autostart,
    launch_agent_plist,
    xdg_config_home,
)

COMMAND = ["/opt/PAIR apps/python3", "-m", "app"]


def read_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path)
    return parser["Desktop Entry"]


def test_xdg_config_home_follows_the_spec(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert xdg_config_home({}, home) == home / ".config"
    assert xdg_config_home({"XDG_CONFIG_HOME": ""}, home) == home / ".config"
    assert xdg_config_home({"XDG_CONFIG_HOME": "relative/dir"}, home) == home / ".config"
    assert xdg_config_home({"XDG_CONFIG_HOME": "/etc/xdg-me"}, home) == Path("/etc/xdg-me")


@pytest.mark.parametrize(
    ("argument", "written"),
    [
        ("/usr/bin/python3", "/usr/bin/python3"),
        ("-m", "-m"),
        ("/opt/My Apps/pair", '"/opt/My Apps/pair"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("$HOME`x`", '"\\$HOME\\`x\\`"'),
        ("100%", "100%%"),
        ("", '""'),
    ],
)
def test_exec_arguments_are_quoted_as_the_desktop_entry_spec_asks(
    argument: str, written: str
) -> None:
    assert exec_argument(argument) == written


@pytest.mark.skipif(sys.platform != "linux", reason="the XDG entry is the Linux implementation")
def test_linux_entry_is_written_to_xdg_config_home_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    entry = autostart.for_this_system(COMMAND)
    path = config / "autostart" / "pair.desktop"
    assert entry.location == str(path)
    assert not entry.is_enabled()
    entry.enable()
    assert entry.is_enabled()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    fields = read_entry(path)
    assert fields["Type"] == "Application"
    assert fields["Name"] == "PAIR"
    assert fields["Terminal"] == "false"
    assert fields["Exec"] == '"/opt/PAIR apps/python3" -m app'
    assert fields["TryExec"] == "/opt/PAIR apps/python3"  # inert once the app is removed
    assert shlex.split(fields["Exec"]) == COMMAND
    entry.enable()  # replacing is fine
    assert list(path.parent.iterdir()) == [path]  # no temp files left behind
    entry.disable()
    assert not path.exists()
    entry.disable()  # and removing twice too
    assert not entry.is_enabled()


def test_backslashes_in_exec_are_escaped_twice() -> None:
    # Once for the Exec quoting rules, once more because Exec is a string value.
    line = next(ln for ln in desktop_entry(["C:\\x y"]).splitlines() if ln.startswith("Exec="))
    assert line == 'Exec="C:\\\\\\\\x y"'


def test_default_command_runs_the_app_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert autostart.launch_command() == [sys.executable, "-m", "app"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert autostart.launch_command() == [sys.executable]


def _installed_package(root: Path) -> tuple[Path, Path]:
    """The .deb's layout under ``root``: the frozen app and the command linked to it."""
    executable = root / "usr" / "lib" / "pair" / "pair"
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    command = root / "usr" / "bin" / "pair"
    command.parent.mkdir(parents=True)
    command.symlink_to(Path("..") / "lib" / "pair" / "pair")
    return executable, command


@pytest.mark.skipif(sys.platform == "win32", reason="the package's command is a symbolic link")
def test_frozen_app_installed_by_the_package_starts_through_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable, command = _installed_package(tmp_path)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(executable))
    assert autostart.launch_command(command) == [str(command)]
    # Started as the command itself, the executable may be reported as the link.
    monkeypatch.setattr(sys, "executable", str(command))
    assert autostart.launch_command(command) == [str(command)]


@pytest.mark.skipif(sys.platform == "win32", reason="the package's command is a symbolic link")
def test_frozen_app_elsewhere_starts_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _packaged, command = _installed_package(tmp_path / "system")
    unpacked = tmp_path / "unpacked" / "pair"
    unpacked.parent.mkdir()
    unpacked.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(unpacked))
    # The command runs another copy of the app, or is missing: this copy names itself.
    assert autostart.launch_command(command) == [str(unpacked)]
    assert autostart.launch_command(tmp_path / "missing") == [str(unpacked)]
    monkeypatch.delattr(sys, "frozen")
    assert autostart.launch_command(command) == [str(unpacked), "-m", "app"]


def test_launch_agent_runs_the_command_at_login(tmp_path: Path) -> None:
    document = plistlib.loads(launch_agent_plist(COMMAND))
    assert document == {
        "Label": LAUNCH_AGENT_LABEL,
        "ProgramArguments": COMMAND,
        "RunAtLoad": True,
        "ProcessType": "Interactive",
    }
    entry = launch_agent_autostart(tmp_path, COMMAND)
    path = tmp_path / "Library" / "LaunchAgents" / f"{LAUNCH_AGENT_LABEL}.plist"
    assert entry.location == str(path)
    entry.enable()
    assert plistlib.loads(path.read_bytes())["ProgramArguments"] == COMMAND
    assert entry.is_enabled()
    entry.disable()
    assert not path.exists()


def test_macos_uses_the_launch_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("HOME", str(tmp_path))
    entry = autostart.for_this_system(COMMAND)
    assert entry.location == str(tmp_path / "Library/LaunchAgents/org.pair.PAIR.plist")


class FakeRunKey:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def read(self, name: str) -> str | None:
        return self.values.get(name)

    def write(self, name: str, value: str) -> None:
        self.values[name] = value

    def delete(self, name: str) -> None:
        self.values.pop(name, None)


def test_windows_run_value_is_one_quoted_command_line() -> None:
    key = FakeRunKey()
    entry = RegistryAutostart(key, ["C:\\Program Files\\PAIR\\PAIR.exe", "--data-dir", "D:\\n"])
    assert entry.location.endswith("\\CurrentVersion\\Run\\PAIR")
    assert not entry.is_enabled()
    entry.enable()
    assert key.values == {RUN_VALUE_NAME: '"C:\\Program Files\\PAIR\\PAIR.exe" --data-dir D:\\n'}
    assert entry.is_enabled()
    entry.disable()
    assert key.values == {}
    entry.disable()
    assert not entry.is_enabled()
