"""The control pipe's instances: the exact kernel32/advapi32 calls that give them a DACL for
the current user alone, against a fake library (runs on any OS)."""

from __future__ import annotations

import ctypes
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.core.winpipe import (
    FILE_FLAG_FIRST_PIPE_INSTANCE,
    FILE_FLAG_OVERLAPPED,
    INVALID_HANDLE_VALUE,
    NMPWAIT_WAIT_FOREVER,
    PIPE_ACCESS_DUPLEX,
    PIPE_READMODE_MESSAGE,
    PIPE_REJECT_REMOTE_CLIENTS,
    PIPE_TYPE_MESSAGE,
    PIPE_UNLIMITED_INSTANCES,
    PipeApi,
    PipeNameTaken,
    SecurityAttributes,
    TokenUser,
    UserPipeFactory,
    current_user_sid,
    load_pipe_api,
    signatures,
    user_only_sddl,
)

SID = "S-1-5-21-1004336348-1177238915-682003330-1001"
SDDL = f"O:{SID}D:P(A;;GA;;;{SID})"
ADDRESS = r"\\.\pipe\pair-alice-0123456789abcdef"
PROCESS, TOKEN, SID_ADDRESS, DESCRIPTOR, PIPE = -1, 0x30, 0x5000, 0x7000, 0x90
TOKEN_USER_SIZE = 44  # TOKEN_USER and the SID after it
PIPE_MODE = 0x4 | 0x2 | 0x8
OPEN_MODE = 0x3 | 0x40000000


@dataclass
class FakePipeApi:
    """Records every call; ``failing`` names the calls that fail (``GetTokenInformation:size``:
    the first, sizing call says nothing either), ``pipe_errors`` the failures of the pipe."""

    failing: set[str] = field(default_factory=set)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    sid_text: ctypes.Array[ctypes.c_wchar] = field(
        default_factory=lambda: ctypes.create_unicode_buffer(SID)
    )

    def _call(self, name: str, *args: Any) -> bool:
        self.calls.append((name, args))
        return name not in self.failing

    @property
    def text_address(self) -> int:
        return ctypes.addressof(self.sid_text)

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
            if "GetTokenInformation:size" not in self.failing:
                needed.contents.value = TOKEN_USER_SIZE
            return 0
        if not ok:
            return 0
        assert length == TOKEN_USER_SIZE == ctypes.sizeof(buffer)
        TokenUser.from_buffer(buffer).Sid = SID_ADDRESS
        return 1

    def ConvertSidToStringSidW(self, sid: int, text: Any) -> int:
        if not self._call("ConvertSidToStringSidW", sid):
            return 0
        text.contents.value = self.text_address
        return 1

    def ConvertStringSecurityDescriptorToSecurityDescriptorW(
        self, sddl: str, revision: int, descriptor: Any, size: None
    ) -> int:
        name = "ConvertStringSecurityDescriptorToSecurityDescriptorW"
        if not self._call(name, sddl, revision, size):
            return 0
        descriptor.contents.value = DESCRIPTOR
        return 1

    def CreateNamedPipeW(self, name: str, *args: Any) -> int | None:
        *numbers, attributes = args
        given = attributes.contents
        security = (given.nLength, given.lpSecurityDescriptor, given.bInheritHandle)
        if not self._call("CreateNamedPipeW", name, *numbers, security):
            return INVALID_HANDLE_VALUE
        return PIPE

    def LocalFree(self, memory: int) -> None:
        self._call("LocalFree", memory)

    def CloseHandle(self, handle: int) -> int:
        return self._call("CloseHandle", handle)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def factory(api: FakePipeApi, error: int = 5) -> UserPipeFactory:
    return UserPipeFactory(ADDRESS, api, last_error=lambda: error)


def test_the_first_instance_is_the_users_alone_and_the_name_must_be_free() -> None:
    api = FakePipeApi()

    assert factory(api).create(first=True) == PIPE
    security = (ctypes.sizeof(SecurityAttributes), DESCRIPTOR, 0)
    assert api.calls == [
        ("GetCurrentProcess", ()),
        ("OpenProcessToken", (PROCESS, 0x0008)),  # TOKEN_QUERY
        ("GetTokenInformation", (TOKEN, 1, 0)),  # TokenUser: how big
        ("GetTokenInformation", (TOKEN, 1, TOKEN_USER_SIZE)),
        ("CloseHandle", (TOKEN,)),
        ("ConvertSidToStringSidW", (SID_ADDRESS,)),
        ("LocalFree", (api.text_address,)),
        ("ConvertStringSecurityDescriptorToSecurityDescriptorW", (SDDL, 1, None)),
        (
            "CreateNamedPipeW",
            (ADDRESS, OPEN_MODE | 0x00080000, PIPE_MODE, 255, 8192, 8192, 0xFFFFFFFF, security),
        ),
        ("LocalFree", (DESCRIPTOR,)),
    ], "the token and both converted buffers are freed; the descriptor is not inheritable"


def test_later_instances_reuse_the_sid_and_may_join_the_name() -> None:
    api = FakePipeApi()
    pipes = factory(api)
    pipes.create(first=True)
    api.calls.clear()

    assert pipes.create(first=False) == PIPE
    assert [(name, args[:2]) for name, args in api.calls] == [
        ("ConvertStringSecurityDescriptorToSecurityDescriptorW", (SDDL, 1)),
        ("CreateNamedPipeW", (ADDRESS, OPEN_MODE)),
        ("LocalFree", (DESCRIPTOR,)),
    ]


def test_the_flags_are_windows_own_values() -> None:
    assert (PIPE_ACCESS_DUPLEX, FILE_FLAG_OVERLAPPED) == (0x3, 0x40000000)
    assert FILE_FLAG_FIRST_PIPE_INSTANCE == 0x00080000
    assert (PIPE_TYPE_MESSAGE, PIPE_READMODE_MESSAGE, PIPE_REJECT_REMOTE_CLIENTS) == (4, 2, 8)
    assert (PIPE_UNLIMITED_INSTANCES, NMPWAIT_WAIT_FOREVER) == (255, 0xFFFFFFFF)
    assert 2 ** (8 * ctypes.sizeof(ctypes.c_void_p)) - 1 == INVALID_HANDLE_VALUE


def test_the_dacl_is_protected_owned_by_and_granting_only_the_user() -> None:
    assert user_only_sddl(SID) == SDDL
    assert "SY" not in SDDL and "BA" not in SDDL and "WD" not in SDDL


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the 64-bit layout")
def test_the_structures_have_windows_64_bit_layout() -> None:
    assert ctypes.sizeof(SecurityAttributes) == 24
    assert SecurityAttributes.lpSecurityDescriptor.offset == 8
    assert SecurityAttributes.bInheritHandle.offset == 16
    assert ctypes.sizeof(TokenUser) == 16 and TokenUser.Attributes.offset == 8


def test_a_name_someone_else_made_first_is_refused_and_the_descriptor_freed() -> None:
    api = FakePipeApi(failing={"CreateNamedPipeW"})

    with pytest.raises(PipeNameTaken, match="another program holds the pipe"):
        factory(api, error=5).create(first=True)  # ERROR_ACCESS_DENIED
    assert api.calls[-1] == ("LocalFree", (DESCRIPTOR,))


def test_a_later_instance_that_cannot_be_made_is_an_ordinary_error() -> None:
    api = FakePipeApi()
    pipes = factory(api, error=231)  # ERROR_PIPE_BUSY
    pipes.create(first=True)
    api.failing.add("CreateNamedPipeW")

    with pytest.raises(OSError, match="CreateNamedPipeW failed with Windows error 231") as caught:
        pipes.create(first=False)
    assert not isinstance(caught.value, PipeNameTaken)
    assert api.calls[-1] == ("LocalFree", (DESCRIPTOR,))


@pytest.mark.parametrize(
    ("failing", "expected_calls"),
    [
        ({"OpenProcessToken"}, ["GetCurrentProcess", "OpenProcessToken"]),
        (
            {"GetTokenInformation:size"},
            ["GetCurrentProcess", "OpenProcessToken", "GetTokenInformation", "CloseHandle"],
        ),
        (
            {"GetTokenInformation"},
            ["GetCurrentProcess", "OpenProcessToken", *["GetTokenInformation"] * 2, "CloseHandle"],
        ),
        (
            {"ConvertSidToStringSidW"},
            [
                "GetCurrentProcess",
                "OpenProcessToken",
                *["GetTokenInformation"] * 2,
                "CloseHandle",
                "ConvertSidToStringSidW",
            ],
        ),
    ],
)
def test_a_failed_sid_lookup_raises_and_leaves_no_handle_open(
    failing: set[str], expected_calls: list[str]
) -> None:
    api = FakePipeApi(failing=failing)

    with pytest.raises(OSError, match="failed with Windows error 1312"):
        current_user_sid(api, last_error=lambda: 1312)
    assert api.names() == expected_calls


def test_a_descriptor_that_cannot_be_made_creates_no_pipe() -> None:
    api = FakePipeApi(failing={"ConvertStringSecurityDescriptorToSecurityDescriptorW"})

    with pytest.raises(OSError, match="SecurityDescriptorW failed with Windows error 87"):
        factory(api, error=87).create(first=True)
    assert "CreateNamedPipeW" not in api.names()
    assert api.names()[-1] == "ConvertStringSecurityDescriptorToSecurityDescriptorW"


def test_the_sid_is_read_once_per_factory() -> None:
    api = FakePipeApi()
    pipes = factory(api)
    for first in (True, False, False):
        pipes.create(first=first)

    assert api.names().count("OpenProcessToken") == 1
    assert current_user_sid(api) == SID


@pytest.mark.skipif(sys.platform == "win32", reason="the libraries load on Windows")
def test_the_real_libraries_are_windows_only() -> None:
    with pytest.raises(OSError, match="Windows only"):
        load_pipe_api()


def test_every_function_is_declared_in_its_library_with_all_its_arguments() -> None:
    declared = signatures("kernel32", "advapi32")
    used = {name for kind in PipeApi.__mro__ for name in vars(kind) if name[0].isupper()}

    assert set(declared) == used
    for name, (library, argtypes, _) in declared.items():
        parameters = list(inspect.signature(getattr(PipeApi, name)).parameters)[1:]
        assert len(argtypes) == len(parameters), name
        expected = "advapi32" if name.startswith(("Open", "GetToken", "Convert")) else "kernel32"
        assert library == expected, name
    assert declared["CreateNamedPipeW"][1][-1] is ctypes.POINTER(SecurityAttributes)
