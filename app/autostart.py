"""Start PAIR at login: an XDG autostart entry (Linux and other free desktops), a LaunchAgent
(macOS) or a ``Run`` registry value (Windows).

The entry contents are pure functions; each platform's ``Autostart`` takes its file location or
registry access from the caller, so all three are tested on any system.
"""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from backend.common.files import write_atomic

ENTRY_NAME = "pair"
LAUNCH_AGENT_LABEL = "org.pair.PAIR"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE_NAME = "PAIR"
# Where the Linux package installs the command (a link into /usr/lib/pair).
INSTALLED_COMMAND = Path("/usr/bin/pair")
# The desktop entry spec's characters that force quoting, and those escaped inside quotes.
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")
_EXEC_ESCAPED = set('"`$\\')


class Autostart(Protocol):
    """Whether PAIR starts at login, and switching it on or off (``OSError`` on failure)."""

    @property
    def location(self) -> str:
        """Where the entry lives, for the user (a path or a registry value)."""
        ...

    def is_enabled(self) -> bool:
        """Whether the entry exists."""
        ...

    def enable(self) -> None:
        """Write the entry (replacing an older one)."""
        ...

    def disable(self) -> None:
        """Remove the entry (nothing to do when it is missing)."""
        ...


def launch_command(installed: Path = INSTALLED_COMMAND) -> list[str]:
    """The command that starts this app: ``installed`` when it runs this frozen executable (the
    .deb's ``/usr/bin/pair``), else the frozen executable, or ``python -m app`` from source."""
    if not getattr(sys, "frozen", False):
        return [sys.executable, "-m", "app"]
    # The installed command is the package's stable interface; the folder behind it is not.
    if runs_executable(installed, Path(sys.executable)):
        return [str(installed)]
    return [sys.executable]


def runs_executable(command: Path, executable: Path) -> bool:
    """Whether ``command`` exists and resolves (through its links) to ``executable``."""
    try:
        return command.resolve(strict=True) == executable.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable, or a loop of links
        return False


def xdg_config_home(environ: Mapping[str, str], home: Path) -> Path:
    """``$XDG_CONFIG_HOME`` when set to an absolute path, else ``~/.config`` (the spec's rule)."""
    value = environ.get("XDG_CONFIG_HOME", "")
    return Path(value) if value and os.path.isabs(value) else home / ".config"


def exec_argument(argument: str) -> str:
    """One argument of a desktop entry's ``Exec`` key, quoted and escaped as the spec asks."""
    argument = argument.replace("%", "%%")
    if argument and not _EXEC_RESERVED.intersection(argument):
        return argument
    inner = "".join(f"\\{char}" if char in _EXEC_ESCAPED else char for char in argument)
    return f'"{inner}"'


def desktop_entry(command: Sequence[str]) -> str:
    """The XDG autostart entry that runs ``command`` at login."""
    # The Exec value is itself a string value, so each backslash is written twice.
    exec_line = " ".join(exec_argument(argument) for argument in command).replace("\\", "\\\\")
    # Desktops skip an entry whose TryExec is missing: one left behind by a removed package
    # (user files are never touched on removal) then does nothing at login.
    try_exec = command[0].replace("\\", "\\\\")
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Name=PAIR",
            "Comment=Personal AI Router: your computers as one private cluster for local LLMs",
            f"Exec={exec_line}",
            f"TryExec={try_exec}",
            "Icon=pair",
            "Terminal=false",
            "X-GNOME-Autostart-enabled=true",
            "",
        ]
    )


def launch_agent_plist(command: Sequence[str], label: str = LAUNCH_AGENT_LABEL) -> bytes:
    """The LaunchAgent property list that runs ``command`` once at login."""
    document = {
        "Label": label,
        "ProgramArguments": list(command),
        "RunAtLoad": True,
        "ProcessType": "Interactive",
    }
    return plistlib.dumps(document)


def run_value(command: Sequence[str]) -> str:
    """The ``Run`` registry value: one command line with Windows quoting."""
    return subprocess.list2cmdline(list(command))


class FileAutostart:
    """An entry that is one file: the XDG desktop entry or the macOS LaunchAgent."""

    def __init__(self, path: Path, contents: bytes) -> None:
        self.path = path
        self._contents = contents

    @property
    def location(self) -> str:
        """The entry's path."""
        return str(self.path)

    def is_enabled(self) -> bool:
        """Whether the file exists."""
        return self.path.is_file()

    def enable(self) -> None:
        """Write the file."""
        write_atomic(self.path, self._contents)

    def disable(self) -> None:
        """Delete the file."""
        self.path.unlink(missing_ok=True)


def xdg_autostart(config_home: Path, command: Sequence[str]) -> FileAutostart:
    """``<config home>/autostart/pair.desktop``."""
    path = config_home / "autostart" / f"{ENTRY_NAME}.desktop"
    return FileAutostart(path, desktop_entry(command).encode())


def launch_agent_autostart(home: Path, command: Sequence[str]) -> FileAutostart:
    """``~/Library/LaunchAgents/<label>.plist`` (loaded by launchd at the next login)."""
    path = home / "Library" / "LaunchAgents" / f"{LAUNCH_AGENT_LABEL}.plist"
    return FileAutostart(path, launch_agent_plist(command))


class RunKey(Protocol):
    """String values under ``HKCU\\...\\Run`` (winreg in production, a dict in tests)."""

    def read(self, name: str) -> str | None:
        """The value, or None when it does not exist."""
        ...

    def write(self, name: str, value: str) -> None:
        """Create or replace the value."""
        ...

    def delete(self, name: str) -> None:
        """Remove the value if it exists."""
        ...


class RegistryAutostart:
    """The ``PAIR`` value under the current user's ``Run`` key."""

    def __init__(self, key: RunKey, command: Sequence[str]) -> None:
        self._key = key
        self._value = run_value(command)

    @property
    def location(self) -> str:
        """The registry value's full name."""
        return f"HKEY_CURRENT_USER\\{RUN_KEY}\\{RUN_VALUE_NAME}"

    def is_enabled(self) -> bool:
        """Whether the value exists."""
        return self._key.read(RUN_VALUE_NAME) is not None

    def enable(self) -> None:
        """Write the value."""
        self._key.write(RUN_VALUE_NAME, self._value)

    def disable(self) -> None:
        """Delete the value."""
        self._key.delete(RUN_VALUE_NAME)


if sys.platform == "win32":
    import winreg

    class WinregRunKey:
        """The real ``Run`` key of the current user."""

        def read(self, name: str) -> str | None:
            """The value, or None."""
            try:
                with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
                    value, _kind = winreg.QueryValueEx(key, name)
            except FileNotFoundError:
                return None
            return str(value)

        def write(self, name: str, value: str) -> None:
            """Create or replace the value."""
            with winreg.CreateKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
                winreg.SetValueEx(key, name, 0, winreg.REG_SZ, value)

        def delete(self, name: str) -> None:
            """Remove the value if it exists."""
            try:
                with winreg.OpenKey(
                    winreg.HKEY_CURRENT_USER, RUN_KEY, 0, winreg.KEY_SET_VALUE
                ) as key:
                    winreg.DeleteValue(key, name)
            except FileNotFoundError:
                return


def for_this_system(command: Sequence[str] | None = None) -> Autostart:
    """The autostart entry for the platform this app runs on."""
    argv = launch_command() if command is None else command
    entry: Autostart
    if sys.platform == "win32":
        entry = RegistryAutostart(WinregRunKey(), argv)
    elif sys.platform == "darwin":
        entry = launch_agent_autostart(Path.home(), argv)
    else:
        entry = xdg_autostart(xdg_config_home(os.environ, Path.home()), argv)
    return entry
