"""The client end of a broker's control pipe, opened so that a stand-in cannot act as this user.

asyncio's ``create_pipe_connection`` opens a pipe with the default quality of service, which lets
the server impersonate the client: a program that made the pipe's name before the broker could
then act as the user. Here the pipe is opened with ``SECURITY_SQOS_PRESENT |
SECURITY_IDENTIFICATION`` (the server may only identify the client), and before a byte is sent
the pipe's owner must be this user, as the broker's pipes are (``backend.core.winpipe`` gives each
instance the user as owner; changing an owner to another user's SID takes a privilege an ordinary
program lacks). Only then is the handle handed to a duplex pipe transport on asyncio's proactor,
as asyncio does for its own pipe connections. Every Windows call goes through an injected
``ClientPipeApi``, so the exact calls, and that each failure closes the handle, are tested on any
OS.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import sys
from collections.abc import Callable
from typing import Protocol

from backend.protocol.winpipe_api import (
    ERROR_FILE_NOT_FOUND,
    ERROR_PIPE_BUSY,
    ERROR_SUCCESS,
    FILE_FLAG_OVERLAPPED,
    GENERIC_READ,
    GENERIC_WRITE,
    INVALID_HANDLE_VALUE,
    OPEN_EXISTING,
    OWNER_SECURITY_INFORMATION,
    SE_KERNEL_OBJECT,
    SECURITY_IDENTIFICATION,
    SECURITY_SQOS_PRESENT,
    ClientPipeApi,
    Handle,
    TokenUser,
    last_windows_error,
    load_client_pipe_api,
    user_sid_buffer,
    windows_error,
)

ERROR_SEM_TIMEOUT = 121  # what WaitNamedPipeW says when its time ran out
# One WaitNamedPipeW blocks the event loop: a slice stays under the GUI's 50 ms budget.
WAIT_SLICE_MS = 20
# The broker makes its next instance as soon as a client takes one, so busy is brief.
BUSY_WAIT_S = 2.0
OPEN_FLAGS = FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class PipeHeldByAnotherProgram(OSError):
    """The pipe's owner is not this user: it is not PAIR's broker, so nothing is sent to it."""


class PipeHandle(Protocol):
    """An owned pipe handle (``asyncio.windows_utils.PipeHandle``)."""

    def fileno(self) -> int:
        """The raw handle."""
        ...

    def close(self) -> None:
        """Close the handle (once)."""
        ...


class ClientPipeIo(Protocol):
    """What the client needs of the event loop."""

    def wrap(self, handle: Handle) -> PipeHandle:
        """Own a raw pipe handle."""
        ...

    def transport(
        self, pipe: PipeHandle, protocol: asyncio.BaseProtocol, address: str
    ) -> asyncio.BaseTransport:
        """A duplex transport over ``pipe`` driving ``protocol``."""
        ...


class ProactorClientIo:
    """asyncio's Windows proactor loop, used the way its ``create_pipe_connection`` uses it."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, wrap: Callable[[Handle], PipeHandle] | None = None
    ) -> None:
        make_transport = getattr(loop, "_make_duplex_pipe_transport", None)
        if getattr(loop, "_proactor", None) is None or make_transport is None:
            raise OSError(f"named pipes need asyncio's proactor event loop, not {loop!r}")
        self._make_transport: Callable[..., asyncio.BaseTransport] = make_transport
        self._wrap = wrap or windows_pipe_handle

    def wrap(self, handle: Handle) -> PipeHandle:
        """``asyncio.windows_utils.PipeHandle`` on Windows."""
        return self._wrap(handle)

    def transport(
        self, pipe: PipeHandle, protocol: asyncio.BaseProtocol, address: str
    ) -> asyncio.BaseTransport:
        """``loop._make_duplex_pipe_transport``, with the address as asyncio gives it."""
        return self._make_transport(pipe, protocol, extra={"addr": address})


def windows_pipe_handle(handle: Handle) -> PipeHandle:
    """``asyncio.windows_utils.PipeHandle(handle)`` (that module is Windows only)."""
    if sys.platform == "win32":
        from asyncio.windows_utils import PipeHandle as AsyncioPipeHandle

        return AsyncioPipeHandle(handle)
    raise OSError("pipe handles are Windows only")


def open_pipe_nowait(
    api: ClientPipeApi, address: str, last_error: Callable[[], int] = last_windows_error
) -> Handle | None:
    """A client handle on a free instance, or None when every instance is busy; raises
    ``FileNotFoundError`` when no pipe has that name."""
    handle = api.CreateFileW(
        address, GENERIC_READ | GENERIC_WRITE, 0, None, OPEN_EXISTING, OPEN_FLAGS, None
    )
    if handle is not None and handle != INVALID_HANDLE_VALUE:
        return handle
    code = last_error()
    if code == ERROR_PIPE_BUSY:
        return None
    if code == ERROR_FILE_NOT_FOUND:
        raise FileNotFoundError(errno.ENOENT, f"no pipe is named {address}")
    raise windows_error("CreateFileW", code)


def check_owner(
    api: ClientPipeApi,
    handle: Handle,
    address: str,
    last_error: Callable[[], int] = last_windows_error,
) -> None:
    """Raise ``PipeHeldByAnotherProgram`` unless the pipe's owner is this process's user."""
    user = user_sid_buffer(api, last_error)
    owner, descriptor = ctypes.c_void_p(), ctypes.c_void_p()
    code = api.GetSecurityInfo(
        handle,
        SE_KERNEL_OBJECT,
        OWNER_SECURITY_INFORMATION,
        ctypes.pointer(owner),
        None,
        None,
        None,
        ctypes.pointer(descriptor),
    )
    if code != ERROR_SUCCESS:
        raise windows_error("GetSecurityInfo", code)
    try:
        same = bool(owner.value) and bool(api.EqualSid(owner.value or 0, _sid(user)))
    finally:
        api.LocalFree(descriptor.value or 0)
    if not same:
        raise PipeHeldByAnotherProgram(
            errno.EACCES,
            f"another program holds PAIR's control pipe {address}: its owner is not this "
            "user, so PAIR sends it nothing (quit that program, or restart Windows)",
        )


def _sid(token_user: ctypes.Array[ctypes.c_char]) -> int:
    return TokenUser.from_buffer(token_user).Sid or 0


async def open_user_pipe(
    address: str,
    api: ClientPipeApi,
    *,
    clock: Callable[[], float],
    last_error: Callable[[], int] = last_windows_error,
    busy_wait_s: float = BUSY_WAIT_S,
) -> Handle:
    """A handle on ``address`` whose owner is this user; waits up to ``busy_wait_s`` (by
    ``clock``) while every instance is busy. A handle that fails the check is closed."""
    handle = await _open_waiting(address, api, clock, last_error, busy_wait_s)
    try:
        check_owner(api, handle, address, last_error)
    except BaseException:
        api.CloseHandle(handle)
        raise
    return handle


async def _open_waiting(
    address: str,
    api: ClientPipeApi,
    clock: Callable[[], float],
    last_error: Callable[[], int],
    busy_wait_s: float,
) -> Handle:
    deadline = clock() + busy_wait_s
    while (handle := open_pipe_nowait(api, address, last_error)) is None:
        if clock() >= deadline:
            raise OSError(errno.EBUSY, f"every instance of {address} stayed busy")
        if not api.WaitNamedPipeW(address, WAIT_SLICE_MS):
            code = last_error()
            if code == ERROR_FILE_NOT_FOUND:  # the broker closed its pipe meanwhile
                raise FileNotFoundError(errno.ENOENT, f"no pipe is named {address}")
            if code != ERROR_SEM_TIMEOUT:
                raise windows_error("WaitNamedPipeW", code)
        await asyncio.sleep(0)  # the slice blocked the loop; let it run before the next
    return handle


async def connect_user_pipe(
    protocol_factory: ProtocolFactory,
    address: str,
    *,
    api: ClientPipeApi | None = None,
    io: ClientPipeIo | None = None,
    last_error: Callable[[], int] = last_windows_error,
    busy_wait_s: float = BUSY_WAIT_S,
) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
    """Connect to this user's pipe ``address`` (``loop.create_pipe_connection``'s contract);
    the defaults need Windows and the proactor loop, and raise OSError elsewhere."""
    loop = asyncio.get_running_loop()
    io = io or ProactorClientIo(loop)
    api = api or load_client_pipe_api()
    handle = await open_user_pipe(
        address, api, clock=loop.time, last_error=last_error, busy_wait_s=busy_wait_s
    )
    try:
        pipe = io.wrap(handle)
    except BaseException:
        api.CloseHandle(handle)
        raise
    try:
        protocol = protocol_factory()
        return io.transport(pipe, protocol, address), protocol
    except BaseException:
        pipe.close()
        raise
