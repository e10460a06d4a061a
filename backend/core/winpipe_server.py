"""A named-pipe server on asyncio's Windows proactor whose instances only this user can open.

It does what asyncio's ``loop.start_serving_pipe`` does (an overlapped ``ConnectNamedPipe`` per
instance, a duplex pipe transport per client) but takes its instances from ``winpipe.py``, with
the user-only DACL. One free instance waits for a client at a time; when a client connects the
next instance is made before the connected one is handed over, so the name is never free for
another program to take while the server runs. The proactor and the instances come in through
small interfaces, so the accept logic is tested on any OS.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol

from backend.core.winpipe import UserPipeFactory, load_pipe_api

log = logging.getLogger(__name__)

RETRY_S = 1.0

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class PipeHandle(Protocol):
    """An owned pipe handle (``asyncio.windows_utils.PipeHandle``)."""

    def fileno(self) -> int:
        """The raw handle."""
        ...

    def close(self) -> None:
        """Close the handle (once)."""
        ...


class PipeIo(Protocol):
    """What the server needs of the event loop."""

    def wrap(self, handle: int) -> PipeHandle:
        """Own a raw pipe handle."""
        ...

    def accept(self, pipe: PipeHandle) -> asyncio.Future[Any]:
        """Wait for a client on ``pipe``; fails with OSError when one came and went."""
        ...

    def serve(self, pipe: PipeHandle, protocol: asyncio.BaseProtocol) -> None:
        """Hand a connected instance to a transport driving ``protocol``."""
        ...


class InstanceFactory(Protocol):
    """Makes the pipe's instances (``winpipe.UserPipeFactory``)."""

    def create(self, *, first: bool) -> int:
        """A new instance; ``first``: the name must not exist yet."""
        ...


class ProactorPipeIo:
    """The proactor of asyncio's Windows event loop, used the way its own pipe server uses it
    (``loop._proactor.accept_pipe``, ``loop._make_duplex_pipe_transport``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        address: str,
        wrap: Callable[[int], PipeHandle] | None = None,
    ) -> None:
        proactor = getattr(loop, "_proactor", None)
        make_transport = getattr(loop, "_make_duplex_pipe_transport", None)
        if proactor is None or make_transport is None:
            raise OSError(f"named pipes need asyncio's proactor event loop, not {loop!r}")
        self._accept_pipe: Callable[[PipeHandle], asyncio.Future[Any]] = proactor.accept_pipe
        self._make_transport: Callable[..., object] = make_transport
        self._address = address
        self._wrap = wrap or windows_pipe_handle

    def wrap(self, handle: int) -> PipeHandle:
        """``asyncio.windows_utils.PipeHandle`` on Windows."""
        return self._wrap(handle)

    def accept(self, pipe: PipeHandle) -> asyncio.Future[Any]:
        """An overlapped ``ConnectNamedPipe`` on the loop's completion port."""
        return self._accept_pipe(pipe)

    def serve(self, pipe: PipeHandle, protocol: asyncio.BaseProtocol) -> None:
        """A duplex pipe transport, as asyncio makes for its own pipe servers."""
        self._make_transport(pipe, protocol, extra={"addr": self._address})


def windows_pipe_handle(handle: int) -> PipeHandle:
    """``asyncio.windows_utils.PipeHandle(handle)`` (that module is Windows only)."""
    if sys.platform == "win32":
        from asyncio.windows_utils import PipeHandle as AsyncioPipeHandle

        return AsyncioPipeHandle(handle)
    raise OSError("pipe handles are Windows only")


class UserPipeServer:
    """Owns the free instance, the accept in flight and a pending retry; each connected
    instance belongs to its transport from then on."""

    def __init__(
        self,
        factory: InstanceFactory,
        io: PipeIo,
        protocol_factory: ProtocolFactory,
        loop: asyncio.AbstractEventLoop,
        *,
        retry_s: float = RETRY_S,
    ) -> None:
        self._factory = factory
        self._retry_s = retry_s
        self._io = io
        self._protocol_factory = protocol_factory
        self._loop = loop
        self._free: PipeHandle | None = None
        self._accepting: asyncio.Future[Any] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        """Make the first instance (raises OSError, ``PipeNameTaken`` when the name is
        someone else's) and wait for clients."""
        self._free = self._io.wrap(self._factory.create(first=True))
        self._accept_next()

    def is_serving(self) -> bool:
        """Until closed."""
        return not self._closed

    def close(self) -> None:
        """Stop accepting: cancel the accept and close the free instance (idempotent)."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        if self._free is not None:
            self._free.close()
            self._free = None

    def _accept_next(self) -> None:
        self._retry = None
        if self._closed:
            return
        try:
            if self._free is None:
                self._free = self._io.wrap(self._factory.create(first=False))
            future = self._io.accept(self._free)
        except OSError as error:
            # A client that connected and left before the accept (the instance is broken), or
            # no new instance (255 connected clients): try again on a fresh one in a moment.
            self._drop_free()
            log.warning("control pipe: cannot accept (%s); again in %.0f s", error, self._retry_s)
            self._retry = self._loop.call_later(self._retry_s, self._accept_next)
            return
        self._accepting = future
        future.add_done_callback(self._on_accepted)

    def _on_accepted(self, future: asyncio.Future[Any]) -> None:
        if self._closed or future is not self._accepting:
            return  # close() cancelled it and closed the instance
        self._accepting = None
        pipe, self._free = self._free, None
        if pipe is None:
            return
        if future.cancelled() or future.exception() is not None:
            log.debug("control pipe: a client left before it was served: %r", _reason(future))
            pipe.close()
            self._accept_next()
            return
        self._accept_next()  # the next instance holds the name before this one is handed on
        self._io.serve(pipe, self._protocol_factory())

    def _drop_free(self) -> None:
        pipe, self._free = self._free, None
        if pipe is not None:
            pipe.close()


def _reason(future: asyncio.Future[Any]) -> BaseException | str:
    return "cancelled" if future.cancelled() else future.exception() or "no error"


async def start_user_pipe_server(
    address: str,
    protocol_factory: ProtocolFactory,
    *,
    factory: InstanceFactory | None = None,
    io: PipeIo | None = None,
) -> UserPipeServer:
    """Serve ``address`` with instances only this user can open (Windows; the defaults load
    kernel32 and advapi32 and need the proactor loop, and raise OSError elsewhere)."""
    loop = asyncio.get_running_loop()
    io = io or ProactorPipeIo(loop, address)
    factory = factory or UserPipeFactory(address, load_pipe_api())
    server = UserPipeServer(factory, io, protocol_factory, loop)
    server.start()
    return server
