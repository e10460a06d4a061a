"""A fake kernel32/advapi32 for the control pipe's client: it records every call and plays a
scripted broker (busy instances, a pipe another user owns, failing calls)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from backend.protocol.winpipe_api import INVALID_HANDLE_VALUE, TokenUser

ADDRESS = r"\\.\pipe\pair-broker-alice-0123456789abcdef"
PROCESS, TOKEN, PIPE = -1, 0x30, 0x90
USER_SID, OWNER_SID, DESCRIPTOR = 0x5000, 0x6000, 0x7000
TOKEN_USER_SIZE = 44  # TOKEN_USER and the SID after it
# GENERIC_READ | GENERIC_WRITE; FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | identification.
ACCESS, FLAGS = 0xC0000000, 0x40110000
CREATE = ("CreateFileW", (ADDRESS, ACCESS, 0, None, 3, FLAGS, None))
TOKEN_CALLS = [
    ("GetCurrentProcess", ()),
    ("OpenProcessToken", (PROCESS, 0x0008)),  # TOKEN_QUERY
    ("GetTokenInformation", (TOKEN, 1, 0)),  # TokenUser: how big
    ("GetTokenInformation", (TOKEN, 1, TOKEN_USER_SIZE)),
    ("CloseHandle", (TOKEN,)),
]
SECURITY = ("GetSecurityInfo", (PIPE, 6, 1, None, None, None))  # SE_KERNEL_OBJECT, owner only


@dataclass
class FakeClientApi:
    """Records every call. ``opens``: CreateFileW's outcomes in turn (an int: it fails with that
    Windows error), then success; ``waits`` likewise for WaitNamedPipeW; ``failing`` names calls
    that fail (``GetTokenInformation:size``: the sizing call says nothing either). The clock, in
    whole milliseconds, moves only while WaitNamedPipeW waits."""

    opens: list[int] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    security_error: int = 0
    owner: int = OWNER_SID
    same_user: bool = True
    error: int = 0
    now_ms: int = 0
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def clock(self) -> float:
        return self.now_ms / 1000

    def last_error(self) -> int:
        return self.error

    def _call(self, name: str, *args: Any) -> bool:
        self.calls.append((name, args))
        if name in self.failing:
            self.error = 1312
            return False
        return True

    def CreateFileW(self, *args: Any) -> int | None:
        self._call("CreateFileW", *args)
        if self.opens:
            self.error = self.opens.pop(0)
            return INVALID_HANDLE_VALUE
        return PIPE

    def WaitNamedPipeW(self, name: str, timeout_ms: int) -> int:
        self._call("WaitNamedPipeW", name, timeout_ms)
        self.now_ms += timeout_ms
        if self.waits:
            self.error = self.waits.pop(0)
            return 0
        return 1

    def GetSecurityInfo(self, handle: int, *args: Any) -> int:
        *numbers, owner, group, dacl, sacl, descriptor = args
        self._call("GetSecurityInfo", handle, *numbers, group, dacl, sacl)
        if self.security_error:
            return self.security_error
        owner.contents.value = self.owner
        descriptor.contents.value = DESCRIPTOR
        return 0

    def GetCurrentProcess(self) -> int:
        self._call("GetCurrentProcess")
        return PROCESS

    def OpenProcessToken(self, process: int, access: int, token: Any) -> int:
        if not self._call("OpenProcessToken", process, access):
            return 0
        token.contents.value = TOKEN
        return 1

    def GetTokenInformation(
        self, token: int, info_class: int, buffer: Any, length: int, needed: Any
    ) -> int:
        ok = self._call("GetTokenInformation", token, info_class, length)
        if buffer is None:  # the sizing call always "fails" with ERROR_INSUFFICIENT_BUFFER
            if "GetTokenInformation:size" in self.failing:
                self.error = 1312
            else:
                needed.contents.value = TOKEN_USER_SIZE
            return 0
        if not ok:
            return 0
        assert length == TOKEN_USER_SIZE == ctypes.sizeof(buffer)
        TokenUser.from_buffer(buffer).Sid = USER_SID
        return 1

    def EqualSid(self, first: int, second: int) -> int:
        self._call("EqualSid", first, second)
        return int(self.same_user)

    def LocalFree(self, memory: int) -> None:
        self._call("LocalFree", memory)

    def CloseHandle(self, handle: int) -> int:
        return self._call("CloseHandle", handle)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]
