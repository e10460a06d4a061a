"""Where a node keeps its data and where its broker's control socket lives.

Every CLI command and the GUI reach a broker through its data directory: the control socket's
address is derived from it, so several nodes (each with its own ``--data-dir``) can run on one
computer without colliding, and the default node needs no flags.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

import platformdirs

APP_NAME = "pair"


def default_data_dir() -> Path:
    """The per-user data directory used when no ``--data-dir`` is given."""
    return platformdirs.user_data_path(APP_NAME, appauthor=False)


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """An absolute data directory: the given one, or the default."""
    return Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()


def log_dir(data_dir: Path) -> Path:
    """Log folder: the platform log dir for the default node, ``<data-dir>/logs`` otherwise."""
    if data_dir == default_data_dir():
        return platformdirs.user_log_path(APP_NAME, appauthor=False)
    return data_dir / "logs"


def control_address(data_dir: Path) -> str:
    """The control socket path (a named pipe on Windows) of the broker for ``data_dir``."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    if sys.platform == "win32":
        return rf"\\.\pipe\pair-{digest}"
    return str(runtime_dir() / f"broker-{digest}.sock")


def runtime_dir() -> Path:
    """A private (0700) per-user directory for sockets; created on demand."""
    if sys.platform == "darwin":
        candidate = platformdirs.user_runtime_path(APP_NAME, appauthor=False)
    else:
        xdg = os.environ.get("XDG_RUNTIME_DIR", "")
        # Containers, su sessions and cron have no XDG runtime dir: use a private tmp dir.
        if xdg and Path(xdg).is_dir():
            candidate = Path(xdg) / APP_NAME
        else:
            candidate = Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}"
    candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = candidate.stat()
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(
            f"{candidate} must be owned by this user with mode 0700; fix or remove it"
        )
    return candidate


async def open_control_connection(
    address: str, *, limit: int = 2**16
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a broker's control socket; raises OSError when nothing listens there."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.create_pipe_connection(  # type: ignore[attr-defined]
            lambda: protocol, address
        )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return reader, writer
    return await asyncio.open_unix_connection(address, limit=limit)
