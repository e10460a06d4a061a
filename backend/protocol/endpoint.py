"""Where a node keeps its data and where its broker's control socket lives.

Every CLI command and the GUI reach a broker through its data directory: the control socket's
address is derived from it, so several nodes (each with its own ``--data-dir``) can run on one
computer without colliding, and the default node needs no flags.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import platformdirs

from backend.protocol.winpipe_client import connect_user_pipe

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


def control_address(
    data_dir: Path, *, sys_platform: str = sys.platform, user: str | None = None
) -> str:
    """The control socket path (a named pipe on Windows) of the broker for ``data_dir``."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    if sys_platform == "win32":
        return pipe_address(digest, user if user is not None else _user_name())
    return str(runtime_dir() / f"broker-{digest}.sock")


def pipe_address(digest: str, user: str) -> str:
    r"""``\\.\pipe\pair-broker-<user>-<digest>``: pipe names are one namespace for the whole
    computer, so the user is in the name and two users' brokers for the same data dir path
    never want the same pipe (the pipe's DACL, not its name, keeps other users out); "broker"
    keeps it apart from the app's single-instance pipe, ``pair-<user>-<digest>``."""
    safe = re.sub(r"[^\w.-]", "_", user)[:64] or "user"
    return rf"\\.\pipe\pair-broker-{safe}-{digest}"


def _user_name() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no USERNAME and no password database
        return ""


def runtime_dir() -> Path:
    """A private (0700) per-user directory for sockets; created on demand.

    Without an XDG runtime dir (containers, su sessions, cron) it is ``/tmp/pair-<uid>``; as
    /tmp is shared and sticky, another user can make that name first, so a name this user does
    not own falls back to a folder in the user's own cache dir (every PAIR process of the user
    makes the same choice)."""
    if sys.platform == "darwin":
        return _private_dir(platformdirs.user_runtime_path(APP_NAME, appauthor=False))
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and Path(xdg).is_dir():
        return _private_dir(Path(xdg) / APP_NAME)
    shared = Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}"
    try:
        return _private_dir(shared)
    except PermissionError:
        return _private_dir(platformdirs.user_cache_path(APP_NAME, appauthor=False) / "run")


def _private_dir(candidate: Path) -> Path:
    """``candidate``, made if missing and tightened to 0700 if this user owns it; raises
    ``PermissionError`` when it is another user's, or a link."""
    candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = candidate.lstat()  # a link someone left there is not this user's folder
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{candidate} is not a folder of this user's")
    if stat.S_IMODE(info.st_mode) & 0o077:
        candidate.chmod(0o700)
    return candidate


async def open_control_connection(
    address: str, *, limit: int = 2**16, sys_platform: str = sys.platform
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a broker's control socket; raises OSError when nothing listens there (or,
    on Windows, the pipe is not this user's: ``winpipe_client.PipeHeldByAnotherProgram``)."""
    if sys_platform == "win32":
        # Not asyncio's create_pipe_connection: it would let the pipe's server impersonate us.
        return await open_pipe_connection(address, connect_user_pipe, limit=limit)
    return await asyncio.open_unix_connection(address, limit=limit)


ProtocolFactory = Callable[[], asyncio.BaseProtocol]
PipeConnect = Callable[
    [ProtocolFactory, str], Awaitable[tuple[asyncio.BaseTransport, asyncio.BaseProtocol]]
]


async def open_pipe_connection(
    address: str, connect: PipeConnect, *, limit: int = 2**16
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over the connection ``connect`` (``loop.create_pipe_connection``) makes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await connect(lambda: protocol, address)
    writer = asyncio.StreamWriter(cast(asyncio.WriteTransport, transport), protocol, reader, loop)
    return reader, writer
