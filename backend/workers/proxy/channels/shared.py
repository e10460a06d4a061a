"""The worker's end of listeners shared over RPC: where a process can neither inherit a
descriptor nor receive one (Windows: no ``pass_fds``, no ``SCM_RIGHTS``), the broker shares
each listening socket with the worker's PID (``socket.share``) and sends the bytes in
``proxy:take-listener``; the worker rebuilds the socket (``socket.fromshare``).

A worker started with ``--shared NAME`` has no socket for NAME yet: it serves no door until
every such listener has arrived (``AwaitedListeners``). The rebuild is injected, so the flow
runs on any OS with a stand-in for the one Windows call.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import socket
import sys
from collections.abc import Callable, Collection

from backend.protocol import errors
from backend.protocol.proxy import SharedListenerName

FromShare = Callable[[bytes], socket.socket]


def system_fromshare(data: bytes) -> socket.socket:
    """``socket.fromshare(data)``, which only Windows has."""
    if sys.platform == "win32":
        return socket.fromshare(data)
    raise OSError("socket.fromshare is Windows only")


def shared_socket(encoded: str, fromshare: FromShare) -> socket.socket:
    """The listening socket behind ``encoded`` (base64 of ``socket.share`` bytes); raises
    ``InvalidParams`` for bytes that are not base64 or that the system cannot rebuild."""
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidParams("the shared listener is not base64") from None
    try:
        return fromshare(data)
    except OSError as exc:
        raise errors.InvalidParams(f"the shared listener could not be rebuilt: {exc}") from None


class AwaitedListeners:
    """The listeners this worker was started without, until each has arrived."""

    def __init__(self, names: Collection[SharedListenerName]) -> None:
        self._missing = set(names)
        self._complete = asyncio.Event()
        if not self._missing:
            self._complete.set()

    def awaited(self, name: SharedListenerName) -> bool:
        """Whether ``name`` has not arrived yet (its first socket is no hand-over)."""
        return name in self._missing

    def arrived(self, name: SharedListenerName) -> None:
        """``name``'s socket is here; the last one to arrive completes the set."""
        self._missing.discard(name)
        if not self._missing:
            self._complete.set()

    async def wait_complete(self) -> None:
        """Return once every awaited listener has arrived (at once if none was)."""
        await self._complete.wait()
