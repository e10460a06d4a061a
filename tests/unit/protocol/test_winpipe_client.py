"""The control pipe's client end: the exact kernel32/advapi32 calls that open it without letting
its server impersonate us and refuse a pipe another user owns, against a fake library (runs on
any OS); every failure leaves no handle open."""

from __future__ import annotations

import ctypes
import inspect
import sys
from ctypes import wintypes
from typing import Any

import pytest

from backend.protocol.winpipe_api import (
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
    TokenUser,
    load_client_pipe_api,
    signatures,
)
from backend.protocol.winpipe_client import (
    WAIT_SLICE_MS,
    PipeHeldByAnotherProgram,
    check_owner,
    open_pipe_nowait,
    open_user_pipe,
)
from tests.unit.protocol.winpipe_fakes import (
    ACCESS,
    ADDRESS,
    CREATE,
    DESCRIPTOR,
    OWNER_SID,
    PIPE,
    SECURITY,
    TOKEN,
    TOKEN_CALLS,
    USER_SID,
    FakeClientApi,
)


async def open_with(api: FakeClientApi, busy_wait_s: float = 2.0) -> int:
    return await open_user_pipe(
        ADDRESS, api, clock=api.clock, last_error=api.last_error, busy_wait_s=busy_wait_s
    )


async def test_the_pipe_is_opened_for_identification_only_and_its_owner_checked() -> None:
    api = FakeClientApi()

    assert await open_with(api) == PIPE
    assert api.calls == [
        CREATE,
        *TOKEN_CALLS,
        SECURITY,
        ("EqualSid", (OWNER_SID, USER_SID)),
        ("LocalFree", (DESCRIPTOR,)),
    ], "the pipe stays open for the caller; the token and the descriptor are freed"


def test_the_flags_are_windows_own_values() -> None:
    assert (GENERIC_READ | GENERIC_WRITE, OPEN_EXISTING) == (ACCESS, 3)
    assert (FILE_FLAG_OVERLAPPED, SECURITY_SQOS_PRESENT) == (0x40000000, 0x00100000)
    assert SECURITY_IDENTIFICATION == 1 << 16  # SecurityIdentification in the SQOS bits
    assert (SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION) == (6, 1)
    assert 2 ** (8 * ctypes.sizeof(ctypes.c_void_p)) - 1 == INVALID_HANDLE_VALUE


async def test_a_pipe_another_user_owns_is_refused_and_closed() -> None:
    api = FakeClientApi(same_user=False)

    with pytest.raises(PipeHeldByAnotherProgram, match="another program holds PAIR's control"):
        await open_with(api)
    assert api.calls[-3:] == [
        ("EqualSid", (OWNER_SID, USER_SID)),
        ("LocalFree", (DESCRIPTOR,)),
        ("CloseHandle", (PIPE,)),
    ]


async def test_a_pipe_without_an_owner_is_refused_without_comparing() -> None:
    api = FakeClientApi(owner=0)

    with pytest.raises(PipeHeldByAnotherProgram):
        await open_with(api)
    assert "EqualSid" not in api.names()
    assert api.calls[-2:] == [("LocalFree", (DESCRIPTOR,)), ("CloseHandle", (PIPE,))]


async def test_an_owner_that_cannot_be_read_closes_the_pipe() -> None:
    api = FakeClientApi(security_error=5)  # ERROR_ACCESS_DENIED, returned, not kept as last

    with pytest.raises(OSError, match="GetSecurityInfo failed with Windows error 5"):
        await open_with(api)
    assert api.calls[-2:] == [SECURITY, ("CloseHandle", (PIPE,))], "nothing was allocated"


@pytest.mark.parametrize(
    ("failing", "token_calls"),
    [
        ({"OpenProcessToken"}, TOKEN_CALLS[:2]),
        ({"GetTokenInformation:size"}, [*TOKEN_CALLS[:3], ("CloseHandle", (TOKEN,))]),
        ({"GetTokenInformation"}, TOKEN_CALLS),
    ],
)
async def test_a_failed_user_lookup_closes_the_token_and_the_pipe(
    failing: set[str], token_calls: list[tuple[str, tuple[Any, ...]]]
) -> None:
    api = FakeClientApi(failing=failing)

    with pytest.raises(OSError, match="failed with Windows error 1312"):
        await open_with(api)
    assert api.calls == [CREATE, *token_calls, ("CloseHandle", (PIPE,))]


def test_no_pipe_of_that_name_is_file_not_found_and_opens_nothing() -> None:
    api = FakeClientApi(opens=[2])  # ERROR_FILE_NOT_FOUND

    with pytest.raises(FileNotFoundError, match="no pipe is named"):
        open_pipe_nowait(api, ADDRESS, api.last_error)
    assert api.calls == [CREATE]


def test_another_open_failure_is_an_os_error_with_its_code() -> None:
    api = FakeClientApi(opens=[5])

    with pytest.raises(OSError, match="CreateFileW failed with Windows error 5") as caught:
        open_pipe_nowait(api, ADDRESS, api.last_error)
    assert not isinstance(caught.value, FileNotFoundError)


def test_every_busy_instance_is_none_not_an_error() -> None:
    api = FakeClientApi(opens=[231])  # ERROR_PIPE_BUSY

    assert open_pipe_nowait(api, ADDRESS, api.last_error) is None


async def test_a_busy_pipe_is_waited_for_in_short_slices() -> None:
    api = FakeClientApi(opens=[231, 231], waits=[121])  # the first wait runs out (timeout)

    assert await open_with(api) == PIPE
    wait = ("WaitNamedPipeW", (ADDRESS, WAIT_SLICE_MS))
    assert api.calls[:5] == [CREATE, wait, CREATE, wait, CREATE]
    assert WAIT_SLICE_MS < 50, "a slice blocks the GUI's loop"
    assert WAIT_SLICE_MS > 0, "0 means the server's default wait: forever for PAIR's pipes"


async def test_a_pipe_busy_past_the_bound_is_an_error_and_opens_nothing() -> None:
    api = FakeClientApi(opens=[231] * 100, waits=[121] * 100)

    with pytest.raises(OSError, match="stayed busy"):
        await open_with(api, busy_wait_s=0.1)
    assert api.names().count("WaitNamedPipeW") == 0.1 * 1000 // WAIT_SLICE_MS
    assert api.names()[-1] == "CreateFileW" and "CloseHandle" not in api.names()


async def test_a_pipe_gone_while_waiting_is_file_not_found() -> None:
    api = FakeClientApi(opens=[231], waits=[2])

    with pytest.raises(FileNotFoundError):
        await open_with(api)
    assert api.names() == ["CreateFileW", "WaitNamedPipeW"]


async def test_a_failed_wait_is_an_error_not_a_spin() -> None:
    api = FakeClientApi(opens=[231] * 100, waits=[5])

    with pytest.raises(OSError, match="WaitNamedPipeW failed with Windows error 5"):
        await open_with(api)
    assert api.names() == ["CreateFileW", "WaitNamedPipeW"]


def test_the_owner_check_alone_leaves_the_handle_to_its_caller() -> None:
    api = FakeClientApi(same_user=False)

    with pytest.raises(PipeHeldByAnotherProgram):
        check_owner(api, PIPE, ADDRESS, api.last_error)
    assert ("CloseHandle", (PIPE,)) not in api.calls


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the 64-bit layout")
def test_token_user_has_windows_64_bit_layout() -> None:
    assert ctypes.sizeof(TokenUser) == 16 and TokenUser.Attributes.offset == 8


@pytest.mark.skipif(sys.platform == "win32", reason="the libraries load on Windows")
def test_the_real_libraries_are_windows_only() -> None:
    with pytest.raises(OSError, match="Windows only"):
        load_client_pipe_api()


def test_every_function_is_declared_in_its_library_with_all_its_arguments() -> None:
    declared = signatures("kernel32", "advapi32")
    used = {name for kind in ClientPipeApi.__mro__ for name in vars(kind) if name[0].isupper()}

    assert set(declared) == used
    advapi32 = {"GetSecurityInfo", "OpenProcessToken", "GetTokenInformation", "EqualSid"}
    for name, (library, argtypes, _) in declared.items():
        parameters = list(inspect.signature(getattr(ClientPipeApi, name)).parameters)[1:]
        assert len(argtypes) == len(parameters), name
        assert library == ("advapi32" if name in advapi32 else "kernel32"), name
    assert declared["GetSecurityInfo"][2] is wintypes.DWORD, "an error code, not a BOOL"
