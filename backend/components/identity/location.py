"""Where a data directory lives: a hashed machine id plus the directory's absolute path."""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MACHINE_ID_FILES: tuple[Path, ...] = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
_MAC_UUID = re.compile(r'"IOPlatformUUID"\s*=\s*"([^"]+)"')


@dataclass(frozen=True, slots=True)
class DataDirLocation:
    """A data directory's place: ``machine`` is a hash of the machine id, empty when unknown."""

    machine: str
    data_dir: str


def machine_id(files: Sequence[Path] = MACHINE_ID_FILES) -> str | None:
    """This computer's stable id from the operating system, or None where it gives none."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        return _windows_machine_guid()
    if sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        return _mac_platform_uuid()
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


def _mac_platform_uuid() -> str | None:  # pragma: no cover - exercised on macOS only
    try:
        output = subprocess.run(
            ["/usr/sbin/ioreg", "-rd1", "-c", "IOPlatformExpertDevice"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = _MAC_UUID.search(output)
    return found.group(1) if found else None


def _windows_machine_guid() -> str | None:  # pragma: no cover - exercised on Windows only
    if sys.platform == "win32":
        import winreg

        try:
            with winreg.OpenKey(
                winreg.HKEY_LOCAL_MACHINE,
                r"SOFTWARE\Microsoft\Cryptography",
                0,
                winreg.KEY_READ | winreg.KEY_WOW64_64KEY,
            ) as key:
                value, _ = winreg.QueryValueEx(key, "MachineGuid")
        except OSError:
            return None
        return str(value) or None
    return None
