"""Files written so a reader never sees half of one: atomic, durable replacement (fsync of the
file and its directory), private files (0600) in private directories (0700)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 if missing; return it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def write_private_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; the file has mode 0600 from its first byte and
    a missing directory is made 0700."""
    ensure_private_dir(path.parent)
    _replace(path, data, mode=0o600)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically (a file others may read; parents made as
    needed with the default mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, data, mode=mode)


def set_aside(path: Path, reason: str, stamp: int) -> Path:
    """Rename a damaged file to ``<name>.<reason>-<stamp>`` so nothing is lost; return it."""
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    counter = 0
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{counter}")
    os.replace(path, target)
    return target


def _replace(path: Path, data: bytes, *, mode: int) -> None:
    # The data reaches the disk before the rename, and the rename before we return: after a
    # power cut the file is the old one or the new one, never empty.
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.chmod(temp_name, mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` reach the disk (POSIX; a no-op elsewhere)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
