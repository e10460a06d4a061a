"""The local control socket: a Unix socket (0600) or Windows named pipe that clients attach to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from backend.core.component import Component, FatalError
from backend.core.rpc import ClientHub, Dispatcher
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)


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
    ) -> None:
        super().__init__("control")
        self.address = address
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
            if sys.platform != "win32":
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.address)

    async def stop(self) -> None:
        """Stop accepting; connected clients are closed by the broker's hub."""
        self._stopped.set()

    async def _listen(self) -> asyncio.AbstractServer:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            loop = asyncio.get_running_loop()
            servers = await loop.start_serving_pipe(  # type: ignore[attr-defined]
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve),
                self.address,
            )
            return servers[0]  # type: ignore[no-any-return]
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
