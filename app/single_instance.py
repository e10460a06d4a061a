"""One app per user and data dir: a second launch asks the running one to show its window.

The running app listens on a local socket named after the user and the data dir; on Unix the
socket lives in the user's runtime dir (``$XDG_RUNTIME_DIR``, else a 0700 folder of its own in
the temp dir) so no other user can reach or squat it. On Windows the name is a named pipe.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

SHOW = b"show\n"
CONNECT_TIMEOUT_MS = 1000
READ_LIMIT = 64
# A Unix socket's path has room for 107 bytes (sun_path); a longer runtime dir falls back.
SOCKET_PATH_LIMIT = 100


def runtime_dir(environ: Mapping[str, str] = os.environ, *, room: int = 0) -> Path:
    """A folder only this user can enter: ``$XDG_RUNTIME_DIR`` when set (and short enough to
    leave ``room`` bytes of a socket path), else ``pair-<user>`` in the temp dir, made 0700
    (refused when it exists and belongs to someone else)."""
    given = environ.get("XDG_RUNTIME_DIR")
    if given and Path(given).is_dir() and len(os.fsencode(given)) + room <= SOCKET_PATH_LIMIT:
        return Path(given)
    folder = Path(tempfile.gettempdir()) / f"pair-{getpass.getuser()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{folder} is not a folder of this user")
    folder.chmod(0o700)
    return folder


def instance_name(data_dir: Path, environ: Mapping[str, str] = os.environ) -> str:
    """The local socket name of the app for ``data_dir`` (a path on Unix, a pipe name on
    Windows)."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    if sys.platform == "win32":
        return f"pair-{getpass.getuser()}-{digest}"
    file_name = f"pair-app-{digest}.sock"
    return str(runtime_dir(environ, room=len(file_name) + 1) / file_name)


def ask_running_app_to_show(name: str, timeout_ms: int = CONNECT_TIMEOUT_MS) -> bool:
    """Tell the app listening at ``name`` to show its window; False when none listens."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(timeout_ms):
        return False
    socket.write(SHOW)
    socket.waitForBytesWritten(timeout_ms)
    socket.disconnectFromServer()
    if socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
        socket.waitForDisconnected(timeout_ms)
    return True


class InstanceServer(QObject):
    """Listens at the app's local socket name; emits ``show_requested`` for each "show".
    Owns the server and its connections; ``close`` removes the socket."""

    show_requested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._on_server_new_connection)

    def listen(self, name: str) -> bool:
        """Listen at ``name``, replacing a socket left by an app that crashed (the caller asked
        it first and nobody answered); whether it listens."""
        if self._server.listen(name):
            return True
        QLocalServer.removeServer(name)
        return self._server.listen(name)

    @property
    def listening(self) -> bool:
        """Whether it listens."""
        return self._server.isListening()

    def close(self) -> None:
        """Stop listening (idempotent)."""
        self._server.close()

    def _on_server_new_connection(self) -> None:
        while (socket := self._server.nextPendingConnection()) is not None:
            socket.readyRead.connect(lambda s=socket: self._on_socket_ready_read(s))
            socket.disconnected.connect(socket.deleteLater)

    def _on_socket_ready_read(self, socket: QLocalSocket) -> None:
        if not socket.canReadLine() and socket.bytesAvailable() < READ_LIMIT:
            return
        line = bytes(socket.readLine(READ_LIMIT).data())
        if line == SHOW:
            self.show_requested.emit()
        socket.disconnectFromServer()
