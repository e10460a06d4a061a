"""The local control socket: a Unix socket (0600), or on Windows a named pipe whose DACL lets
only this user open it (``winpipe.py``); clients attach to it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from backend.core.component import Component, FatalError
from backend.core.rpc import ClientHub, Dispatcher
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)


class Listener(Protocol):
    """A listening server: a Unix socket server, or the Windows pipe server."""

    def close(self) -> None:
        """Stop accepting."""
        ...


ProtocolFactory = Callable[[], asyncio.BaseProtocol]
StartPipeServer = Callable[[str, ProtocolFactory], Awaitable[Listener]]


async def start_user_pipe(address: str, protocol_factory: ProtocolFactory) -> Listener:
    """The Windows named pipe that only this user can open (``winpipe_server.py``)."""
    from backend.core.winpipe_server import start_user_pipe_server

    return await start_user_pipe_server(address, protocol_factory)


class ControlServer(Component):
    """Owns the listening socket and one ``RpcPeer`` per connected client."""

    ready_on_start = False

    def __init__(
        self,
        address: str,
        *,
        dispatcher: Dispatcher,
        hub: ClientHub,
        on_connect: Callable[[RpcPeer], None],
        sys_platform: str = sys.platform,
        start_pipe_server: StartPipeServer = start_user_pipe,
    ) -> None:
        super().__init__("control")
        self.address = address
        self._windows = sys_platform == "win32"
        self._start_pipe_server = start_pipe_server
        self._dispatcher = dispatcher
        self._hub = hub
        self._on_connect = on_connect
        self._stopped = asyncio.Event()
        self._counter = 0

    async def run(self) -> None:
        """Listen until stopped; the socket file is removed when the run ends."""
        self._stopped.clear()
        server = await self._listen()
        try:
            self.announce_ready()
            log.info("control socket listening at %s", self.address)
            await self._stopped.wait()
        finally:
            server.close()
            if not self._windows:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.address)

    async def stop(self) -> None:
        """Stop accepting; connected clients are closed by the broker's hub."""
        self._stopped.set()

    async def _listen(self) -> Listener:
        if self._windows:
            return await self._listen_on_pipe()
        _remove_stale_socket(Path(self.address))
        old_umask = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(self._serve, path=self.address)
        except OSError as exc:
            raise FatalError(f"cannot listen on {self.address}: {exc}") from exc
        finally:
            os.umask(old_umask)
        os.chmod(self.address, 0o600)
        return server

    async def _listen_on_pipe(self) -> Listener:
        def protocol() -> asyncio.BaseProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve)

        try:
            return await self._start_pipe_server(self.address, protocol)
        except OSError as exc:
            # The name held by another program (``PipeNameTaken``) lands here too.
            raise FatalError(f"cannot listen on {self.address}: {exc}") from exc

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._counter += 1
        peer = RpcPeer(reader, writer, name=f"client-{self._counter}", on_request=self._dispatcher)
        self._hub.add(peer)
        try:
            self._on_connect(peer)
            await peer.run()
        except Exception:
            log.exception("client connection %s failed", peer.name)
        finally:
            self._hub.remove(peer)


def _remove_stale_socket(path: Path) -> None:
    # A socket file left by a dead broker; safe to remove because we hold the instance lock.
    if path.exists() or path.is_symlink():
        path.unlink()
