"""The kernel32 and advapi32 functions a control pipe client calls, and Windows' own values.

Kept apart from ``winpipe_client.py`` so the client's logic takes this interface as an injected
object and its exact calls are tested on any OS against a fake. The broker's side of the same pipe
is ``backend.core.winpipe``; the app may not import ``backend.core``, so the token lookup lives
here (``TokenApi``, ``user_sid_buffer``) and the broker's side uses it too.
"""

from __future__ import annotations

import ctypes
import sys
import types
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, cast

GENERIC_READ = 0x80000000
GENERIC_WRITE = 0x40000000
OPEN_EXISTING = 3
FILE_FLAG_OVERLAPPED = 0x40000000
# The server may only identify the client, never act as it (the default is impersonation).
SECURITY_SQOS_PRESENT = 0x00100000
SECURITY_IDENTIFICATION = 0x00010000  # SecurityIdentification << 16
SE_KERNEL_OBJECT = 6  # the SE_OBJECT_TYPE value
OWNER_SECURITY_INFORMATION = 0x00000001
TOKEN_QUERY = 0x0008
TOKEN_USER = 1  # the TOKEN_INFORMATION_CLASS value
ERROR_SUCCESS = 0
ERROR_FILE_NOT_FOUND = 2
ERROR_PIPE_BUSY = 231
INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value

Handle = int
Address = int
Out: TypeAlias = "ctypes._Pointer[ctypes.c_void_p]"  # a string: no subscript at run time


class TokenUser(ctypes.Structure):
    """``TOKEN_USER`` (one ``SID_AND_ATTRIBUTES``)."""

    _fields_ = [("Sid", ctypes.c_void_p), ("Attributes", ctypes.c_uint32)]


class TokenApi(Protocol):
    """What reading this process's user from its token calls (the broker's pipe,
    ``backend.core.winpipe``, and the client's owner check both do)."""

    def GetCurrentProcess(self) -> Handle:  # noqa: N802
        """This process's pseudo-handle."""
        ...

    def OpenProcessToken(self, process: Handle, access: int, token: Out) -> int:  # noqa: N802
        """Open the process's access token."""
        ...

    def GetTokenInformation(  # noqa: N802
        self,
        token: Handle,
        info_class: int,
        buffer: ctypes.Array[ctypes.c_char] | None,
        length: int,
        needed: ctypes._Pointer[ctypes.c_uint32],
    ) -> int:
        """Fill ``buffer`` with the token's information; says the size needed."""
        ...

    def CloseHandle(self, handle: Handle) -> int:  # noqa: N802
        """Close a handle."""
        ...


class ClientPipeApi(TokenApi, Protocol):
    """The functions used, as ctypes calls them (NULL is None; an out parameter is a
    ``ctypes.pointer`` the call writes through)."""

    def CreateFileW(  # noqa: N802
        self,
        name: str,
        access: int,
        share_mode: int,
        attributes: None,
        disposition: int,
        flags: int,
        template: None,
    ) -> Handle | None:
        """Open the client end of a pipe instance."""
        ...

    def WaitNamedPipeW(self, name: str, timeout_ms: int) -> int:  # noqa: N802
        """Wait until an instance of the pipe is free (or ``timeout_ms`` passed)."""
        ...

    def GetSecurityInfo(  # noqa: N802
        self,
        handle: Handle,
        object_type: int,
        information: int,
        owner: Out,
        group: None,
        dacl: None,
        sacl: None,
        descriptor: Out,
    ) -> int:
        """The object's owner SID (inside ``descriptor``, freed with LocalFree); an error
        code, 0 on success."""
        ...

    def EqualSid(self, first: Address, second: Address) -> int:  # noqa: N802
        """Whether two SIDs are the same."""
        ...

    def LocalFree(self, memory: Address) -> Address | None:  # noqa: N802
        """Free what GetSecurityInfo allocated."""
        ...


Signature = tuple[object, list[Any], Any]


def signatures(kernel32: object, advapi32: object) -> dict[str, Signature]:
    """Each function's library, argument types and result type (64-bit handles stay whole)."""
    from ctypes import wintypes

    handle, dword, bool_ = wintypes.HANDLE, wintypes.DWORD, wintypes.BOOL
    out = ctypes.POINTER(ctypes.c_void_p)
    pointer = ctypes.c_void_p
    return {
        "CreateFileW": (
            kernel32,
            [wintypes.LPCWSTR, dword, dword, pointer, dword, dword, handle],
            handle,
        ),
        "WaitNamedPipeW": (kernel32, [wintypes.LPCWSTR, dword], bool_),
        "GetSecurityInfo": (
            advapi32,
            [handle, ctypes.c_int, dword, out, out, out, out, out],
            dword,
        ),
        "GetCurrentProcess": (kernel32, [], handle),
        "OpenProcessToken": (advapi32, [handle, dword, out], bool_),
        "GetTokenInformation": (
            advapi32,
            [handle, ctypes.c_int, pointer, dword, ctypes.POINTER(ctypes.c_uint32)],
            bool_,
        ),
        "EqualSid": (advapi32, [pointer, pointer], bool_),
        "LocalFree": (kernel32, [pointer], pointer),
        "CloseHandle": (kernel32, [handle], bool_),
    }


def load_client_pipe_api() -> ClientPipeApi:
    """The real functions, from kernel32 and advapi32, with their signatures declared."""
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)
        functions = {}
        for name, (dll, argtypes, restype) in signatures(kernel32, advapi32).items():
            function = getattr(dll, name)
            function.argtypes, function.restype = argtypes, restype
            functions[name] = function
        return cast(ClientPipeApi, types.SimpleNamespace(**functions))
    raise OSError("the control pipe client is Windows only")


def last_windows_error() -> int:
    """The calling thread's last Windows error as ctypes saved it (0 off Windows)."""
    get: Callable[[], int] = getattr(ctypes, "get_last_error", lambda: 0)
    return get()


def windows_error(call: str, code: int) -> OSError:
    """The error of a failed call, with the Windows error code."""
    return OSError(code, f"{call} failed with Windows error {code}")


def user_sid_buffer(
    api: TokenApi, last_error: Callable[[], int] = last_windows_error
) -> ctypes.Array[ctypes.c_char]:
    """This process's ``TOKEN_USER``, SID included (``TokenUser.from_buffer(...).Sid`` points
    into it, so it lives as long as the buffer)."""
    token = ctypes.c_void_p()
    if not api.OpenProcessToken(api.GetCurrentProcess(), TOKEN_QUERY, ctypes.pointer(token)):
        raise windows_error("OpenProcessToken", last_error())
    try:
        return _token_user(api, token.value or 0, last_error)
    finally:
        api.CloseHandle(token.value or 0)


def _token_user(
    api: TokenApi, token: Handle, last_error: Callable[[], int]
) -> ctypes.Array[ctypes.c_char]:
    # The first call only says how big TOKEN_USER (with its SID) is.
    needed = ctypes.c_uint32()
    api.GetTokenInformation(token, TOKEN_USER, None, 0, ctypes.pointer(needed))
    if needed.value < ctypes.sizeof(TokenUser):
        raise windows_error("GetTokenInformation", last_error())
    buffer = ctypes.create_string_buffer(needed.value)
    if not api.GetTokenInformation(token, TOKEN_USER, buffer, needed.value, ctypes.pointer(needed)):
        raise windows_error("GetTokenInformation", last_error())
    return buffer
