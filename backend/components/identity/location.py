"""Where a data directory lives: a hashed machine id plus the directory's absolute path."""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, cast

import msgspec

MACHINE_ID_FILES: tuple[Path, ...] = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
_MAC_UUID = re.compile(r'"IOPlatformUUID"\s*=\s*"([^"]+)"')
IOREG_PLATFORM = ("/usr/sbin/ioreg", "-rd1", "-c", "IOPlatformExpertDevice")
CRYPTOGRAPHY_KEY = r"SOFTWARE\Microsoft\Cryptography"


class DataDirLocation(msgspec.Struct, frozen=True):
    """A data directory's place: ``machine`` is a hash of the machine id, empty when unknown."""

    machine: str
    data_dir: str


def machine_id(
    files: Sequence[Path] = MACHINE_ID_FILES,
    *,
    sys_platform: str = sys.platform,
    windows: Callable[[], str | None] | None = None,
    mac: Callable[[], str | None] | None = None,
) -> str | None:
    """This computer's stable id from the operating system, or None where it gives none:
    Windows' MachineGuid, macOS's IOPlatformUUID, else the first readable machine-id file."""
    if sys_platform == "win32":
        return (windows or windows_machine_guid)()
    if sys_platform == "darwin":
        return (mac or mac_platform_uuid)()
    for path in files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text().strip()
            if text:
                return text
    return None


def hash_machine_id(raw: str | None) -> str:
    """A PAIR-specific hash of ``raw``; empty for an unknown id."""
    # machine-id(5) asks applications not to store or send the raw id; a keyed hash is enough to
    # tell two computers apart.
    if not raw:
        return ""
    return hashlib.sha256(b"pair-node-identity:" + raw.encode()).hexdigest()


def data_dir_location(
    data_dir: Path, read_machine_id: Callable[[], str | None] = machine_id
) -> DataDirLocation:
    """Where ``data_dir`` is on this computer now (blocking: run it in a thread)."""
    return DataDirLocation(hash_machine_id(read_machine_id()), str(data_dir.resolve()))


def directory_holds_node(data_dir: Path, database_name: str, node_id: str) -> bool:
    """Whether ``data_dir`` still holds the node ``node_id`` (blocking: run it in a thread).

    A database that exists but cannot be read counts as holding it: when in doubt, a copy gets a
    new identity rather than two nodes sharing one unnoticed.
    """
    database = data_dir / database_name
    if not database.is_file():
        return False
    try:
        uri = database.resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1.0)) as connection:
            row = connection.execute("SELECT value FROM meta WHERE key = 'node_id'").fetchone()
    except sqlite3.Error:
        return True
    return row is not None and row[0] == node_id


def run_output(argv: Sequence[str]) -> str | None:
    """What ``argv`` writes to stdout, or None when it cannot run (blocking, 5 s at most)."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def mac_platform_uuid(run: Callable[[Sequence[str]], str | None] = run_output) -> str | None:
    """macOS's hardware UUID, as ``ioreg`` shows the platform expert device."""
    output = run(IOREG_PLATFORM)
    return parse_ioreg_uuid(output) if output is not None else None


def parse_ioreg_uuid(output: str) -> str | None:
    """The ``"IOPlatformUUID" = "…"`` value of ``ioreg -rd1 -c IOPlatformExpertDevice``."""
    found = _MAC_UUID.search(output)
    return found.group(1) if found else None


class RegistryKey(Protocol):
    """An open registry key, as ``winreg.OpenKey`` returns it."""

    def __enter__(self) -> RegistryKey: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None: ...


class Registry(Protocol):
    """The part of ``winreg`` read here."""

    HKEY_LOCAL_MACHINE: int
    KEY_READ: int
    KEY_WOW64_64KEY: int

    def OpenKey(self, key: int, sub_key: str, reserved: int, access: int) -> RegistryKey:  # noqa: N802
        """Open a key."""
        ...

    def QueryValueEx(self, key: RegistryKey, name: str) -> tuple[object, int]:  # noqa: N802
        """A value and its type."""
        ...


def windows_registry() -> Registry | None:
    """``winreg``, on Windows only."""
    if sys.platform == "win32":
        import winreg

        return cast(Registry, winreg)
    return None


def windows_machine_guid(registry: Registry | None = None) -> str | None:
    """Windows' MachineGuid, read from the 64-bit registry view even in a 32-bit process (the
    32-bit view of that key may lack it, or differ)."""
    registry = registry or windows_registry()
    if registry is None:
        return None
    access = registry.KEY_READ | registry.KEY_WOW64_64KEY
    try:
        with registry.OpenKey(registry.HKEY_LOCAL_MACHINE, CRYPTOGRAPHY_KEY, 0, access) as key:
            value, _ = registry.QueryValueEx(key, "MachineGuid")
    except OSError:
        return None
    return str(value) or None
