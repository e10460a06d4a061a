"""Windows named-pipe instances that only the current user can open.

asyncio's own pipe server creates its pipes with a NULL security descriptor, whose default DACL
lets every user read from them (and the anonymous logon too). PAIR's control pipe carries API
keys and shutdown commands, so each instance is created here with a protected DACL that grants
the user running the broker alone: ``O:<SID>D:P(A;;GA;;;<SID>)`` (the SID read from this
process's token). SYSTEM and Administrators get no entry: nothing of theirs talks to PAIR, and
what they could do without one (take ownership, debug the broker) they can do anyway.

The first instance carries ``FILE_FLAG_FIRST_PIPE_INSTANCE``: if another program made the name
first, the broker fails instead of serving clients next to it; every instance rejects remote
clients. Every kernel32 and advapi32 call goes through an injected object, so the exact calls are
tested on any OS (``backend.core.lifetime.windows`` does the same for job objects).
"""

from __future__ import annotations

import ctypes
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from backend.core.lifetime.windows import last_windows_error
from backend.protocol.winpipe_api import TokenApi, TokenUser, user_sid_buffer, windows_error

PIPE_ACCESS_DUPLEX = 0x00000003
FILE_FLAG_OVERLAPPED = 0x40000000
FILE_FLAG_FIRST_PIPE_INSTANCE = 0x00080000
# Message mode, as asyncio's PipeServer makes them (its transports read them that way).
PIPE_TYPE_MESSAGE = 0x00000004
PIPE_READMODE_MESSAGE = 0x00000002
PIPE_WAIT = 0x00000000
PIPE_REJECT_REMOTE_CLIENTS = 0x00000008
PIPE_UNLIMITED_INSTANCES = 255
PIPE_BUFFER_SIZE = 8192  # asyncio.windows_utils.BUFSIZE
NMPWAIT_WAIT_FOREVER = 0xFFFFFFFF
SDDL_REVISION_1 = 1
ERROR_ACCESS_DENIED = 5
ERROR_INSUFFICIENT_BUFFER = 122
INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value

Handle = int
Address = int


class SecurityAttributes(ctypes.Structure):
    """``SECURITY_ATTRIBUTES``."""

    _fields_ = [
        ("nLength", ctypes.c_uint32),
        ("lpSecurityDescriptor", ctypes.c_void_p),
        ("bInheritHandle", ctypes.c_int32),
    ]


class PipeApi(TokenApi, Protocol):
    """The kernel32 and advapi32 functions used here, as ctypes calls them (NULL is None;
    an out parameter is a ``ctypes.pointer`` the call writes through)."""

    def ConvertSidToStringSidW(  # noqa: N802
        self, sid: Address, text: ctypes._Pointer[ctypes.c_void_p]
    ) -> int:
        """``S-1-5-…`` for a SID, in a buffer to free with LocalFree."""
        ...

    def ConvertStringSecurityDescriptorToSecurityDescriptorW(  # noqa: N802
        self,
        sddl: str,
        revision: int,
        descriptor: ctypes._Pointer[ctypes.c_void_p],
        size: None,
    ) -> int:
        """A self-relative security descriptor for an SDDL string (free with LocalFree)."""
        ...

    def CreateNamedPipeW(  # noqa: N802
        self,
        name: str,
        open_mode: int,
        pipe_mode: int,
        max_instances: int,
        out_buffer: int,
        in_buffer: int,
        default_timeout: int,
        attributes: ctypes._Pointer[SecurityAttributes],
    ) -> Handle | None:
        """One instance of the named pipe."""
        ...

    def LocalFree(self, memory: Address) -> Address | None:  # noqa: N802
        """Free what a conversion allocated."""
        ...


def load_pipe_api() -> PipeApi:
    """The real functions, from kernel32 and advapi32, with their signatures declared."""
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)
        functions = {}
        for name, (dll, argtypes, restype) in signatures(kernel32, advapi32).items():
            function = getattr(dll, name)
            function.argtypes, function.restype = argtypes, restype
            functions[name] = function
        return cast(PipeApi, types.SimpleNamespace(**functions))
    raise OSError("named pipes with a DACL are Windows only")


Signature = tuple[object, list[Any], Any]


def signatures(kernel32: object, advapi32: object) -> dict[str, Signature]:
    """Each function's library, argument types and result type (64-bit handles stay whole)."""
    from ctypes import wintypes

    handle, dword, bool_ = wintypes.HANDLE, wintypes.DWORD, wintypes.BOOL
    out = ctypes.POINTER(ctypes.c_void_p)
    return {
        "GetCurrentProcess": (kernel32, [], handle),
        "OpenProcessToken": (advapi32, [handle, dword, out], bool_),
        "GetTokenInformation": (
            advapi32,
            [handle, ctypes.c_int, ctypes.c_void_p, dword, ctypes.POINTER(ctypes.c_uint32)],
            bool_,
        ),
        "ConvertSidToStringSidW": (advapi32, [ctypes.c_void_p, out], bool_),
        "ConvertStringSecurityDescriptorToSecurityDescriptorW": (
            advapi32,
            [wintypes.LPCWSTR, dword, out, ctypes.POINTER(ctypes.c_ulong)],
            bool_,
        ),
        "CreateNamedPipeW": (
            kernel32,
            [wintypes.LPCWSTR, *[dword] * 6, ctypes.POINTER(SecurityAttributes)],
            handle,
        ),
        "LocalFree": (kernel32, [ctypes.c_void_p], ctypes.c_void_p),
        "CloseHandle": (kernel32, [handle], bool_),
    }


def current_user_sid(api: PipeApi, last_error: Callable[[], int] = last_windows_error) -> str:
    """The SID of the user this process runs as (``S-1-5-21-…``), from its token."""
    buffer = user_sid_buffer(api, last_error)
    text = ctypes.c_void_p()
    if not api.ConvertSidToStringSidW(TokenUser.from_buffer(buffer).Sid, ctypes.pointer(text)):
        raise windows_error("ConvertSidToStringSidW", last_error())
    try:
        return ctypes.wstring_at(text.value or 0)
    finally:
        api.LocalFree(text.value or 0)


def user_only_sddl(sid: str) -> str:
    """Owned by ``sid``, and a protected DACL (nothing inherited) granting ``sid`` alone."""
    return f"O:{sid}D:P(A;;GA;;;{sid})"


class PipeNameTaken(OSError):
    """Another program made the pipe's first instance: this one cannot be the server."""


@dataclass
class UserPipeFactory:
    """Makes the instances of one pipe name, each with the user-only DACL."""

    address: str
    api: PipeApi = field(repr=False)
    last_error: Callable[[], int] = field(default=last_windows_error, repr=False)
    _sddl: str | None = field(default=None, init=False, repr=False)

    def create(self, *, first: bool) -> Handle:
        """A new overlapped instance (``first``: the name must not exist yet)."""
        if self._sddl is None:
            self._sddl = user_only_sddl(current_user_sid(self.api, self.last_error))
        descriptor = ctypes.c_void_p()
        if not self.api.ConvertStringSecurityDescriptorToSecurityDescriptorW(
            self._sddl, SDDL_REVISION_1, ctypes.pointer(descriptor), None
        ):
            call = "ConvertStringSecurityDescriptorToSecurityDescriptorW"
            raise windows_error(call, self.last_error())
        try:
            return self._create_instance(descriptor.value or 0, first=first)
        finally:
            self.api.LocalFree(descriptor.value or 0)

    def _create_instance(self, descriptor: Address, *, first: bool) -> Handle:
        attributes = SecurityAttributes(ctypes.sizeof(SecurityAttributes), descriptor, 0)
        open_mode = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED
        if first:
            open_mode |= FILE_FLAG_FIRST_PIPE_INSTANCE
        handle = self.api.CreateNamedPipeW(
            self.address,
            open_mode,
            PIPE_TYPE_MESSAGE | PIPE_READMODE_MESSAGE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            PIPE_UNLIMITED_INSTANCES,
            PIPE_BUFFER_SIZE,
            PIPE_BUFFER_SIZE,
            NMPWAIT_WAIT_FOREVER,
            ctypes.pointer(attributes),
        )
        if handle is None or handle == INVALID_HANDLE_VALUE:
            code = self.last_error()
            if first and code == ERROR_ACCESS_DENIED:
                raise PipeNameTaken(code, f"another program holds the pipe {self.address}")
            raise windows_error("CreateNamedPipeW", code)
        return handle
