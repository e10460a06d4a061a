"""The Windows lifetime's exact kernel32 calls, against a fake kernel32 (runs on any OS)."""

from __future__ import annotations

import ctypes
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from backend.core.lifetime import Ending, for_platform
from backend.core.lifetime.windows import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    PROCESS_SET_QUOTA,
    PROCESS_TERMINATE,
    ExtendedLimitInformation,
    WindowsLifetime,
    load_kernel32,
)

JOB, PROCESS = 0x40, 0x88


@dataclass
class FakeKernel32:
    """Records every call; ``failing`` names the functions that return failure."""

    failing: set[str] = field(default_factory=set)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    limit_flags: list[int] = field(default_factory=list)

    def _call(self, name: str, *args: Any) -> bool:
        self.calls.append((name, args))
        return name not in self.failing

    def CreateJobObjectW(self, attributes: None, name: None) -> int | None:
        return JOB if self._call("CreateJobObjectW", attributes, name) else None

    def SetInformationJobObject(self, job: int, info_class: int, info: Any, length: int) -> int:
        self.limit_flags.append(info.contents.BasicLimitInformation.LimitFlags)
        return self._call("SetInformationJobObject", job, info_class, length)

    def OpenProcess(self, access: int, inherit: bool, pid: int) -> int | None:
        return PROCESS if self._call("OpenProcess", access, inherit, pid) else None

    def AssignProcessToJobObject(self, job: int, process: int) -> int:
        return self._call("AssignProcessToJobObject", job, process)

    def TerminateJobObject(self, job: int, exit_code: int) -> int:
        return self._call("TerminateJobObject", job, exit_code)

    def CloseHandle(self, handle: int) -> int:
        return self._call("CloseHandle", handle)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


@dataclass
class FakeChild:
    pid: int = 4242
    terminated: int = 0
    gone: bool = False

    def terminate(self) -> None:
        if self.gone:
            raise ProcessLookupError
        self.terminated += 1


def lifetime(kernel32: FakeKernel32, loads: list[int] | None = None) -> WindowsLifetime:
    def load() -> Any:
        if loads is not None:
            loads.append(1)
        return kernel32

    return WindowsLifetime(kernel32=load, last_error=lambda: 5)


def test_the_child_gets_its_own_group_no_window_and_no_preexec() -> None:
    options = for_platform("win32").spawn_options(ignore_sigpipe=True)

    assert options == {"creationflags": CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW}
    assert CREATE_NEW_PROCESS_GROUP == 0x200 and CREATE_NO_WINDOW == 0x08000000
    assert for_platform("win32").command(["llama-server", "-m", "x"]) == ["llama-server", "-m", "x"]


def test_the_child_goes_into_a_kill_on_close_job_whose_handle_is_kept() -> None:
    kernel32 = FakeKernel32()
    tree = lifetime(kernel32).adopt(FakeChild())

    assert kernel32.calls == [
        ("CreateJobObjectW", (None, None)),
        (
            "SetInformationJobObject",
            (JOB, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.sizeof(ExtendedLimitInformation)),
        ),
        ("OpenProcess", (PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, 4242)),
        ("AssignProcessToJobObject", (JOB, PROCESS)),
        ("CloseHandle", (PROCESS,)),
    ], "only the process handle is closed: the job's stays open while the broker lives"
    assert kernel32.limit_flags == [JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE] == [0x2000]
    assert JOB_OBJECT_EXTENDED_LIMIT_INFORMATION == 9
    assert (PROCESS_SET_QUOTA, PROCESS_TERMINATE) == (0x100, 0x1)

    kernel32.calls.clear()
    tree.release()
    tree.release()
    assert kernel32.calls == [("CloseHandle", (JOB,))], "closed once, when let go"


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the 64-bit layout")
def test_the_limit_structure_has_windows_64_bit_layout() -> None:
    assert ctypes.sizeof(ExtendedLimitInformation) == 144
    assert ExtendedLimitInformation.IoInfo.offset == 64
    assert ExtendedLimitInformation.ProcessMemoryLimit.offset == 112


def test_kill_ends_the_whole_job_and_terminate_the_main_process() -> None:
    kernel32, child = FakeKernel32(), FakeChild()
    tree = lifetime(kernel32).adopt(child)
    kernel32.calls.clear()

    tree.end(Ending.TERMINATE)
    assert child.terminated == 1 and kernel32.calls == []
    tree.end(Ending.KILL)
    assert kernel32.calls == [("TerminateJobObject", (JOB, 1))] and child.terminated == 1


def test_a_failed_assignment_is_logged_and_the_child_runs_untied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kernel32, child = FakeKernel32(failing={"AssignProcessToJobObject"}), FakeChild()
    with caplog.at_level(logging.WARNING):
        tree = lifetime(kernel32).adopt(child)

    assert kernel32.names()[-3:] == ["AssignProcessToJobObject", "CloseHandle", "CloseHandle"]
    assert kernel32.calls[-2:] == [("CloseHandle", (PROCESS,)), ("CloseHandle", (JOB,))]
    assert "pid 4242 runs without a job object" in caplog.text
    assert "AssignProcessToJobObject failed with Windows error 5" in caplog.text
    assert child.terminated == 0, "the child is left running"

    kernel32.calls.clear()
    tree.end(Ending.KILL)
    tree.release()
    assert child.terminated == 1 and kernel32.calls == [], "without a job: its own handle"


@pytest.mark.parametrize(
    ("failing", "expected_calls"),
    [
        ({"CreateJobObjectW"}, ["CreateJobObjectW"]),
        (
            {"SetInformationJobObject"},
            ["CreateJobObjectW", "SetInformationJobObject", "CloseHandle"],
        ),
        (
            {"OpenProcess"},
            ["CreateJobObjectW", "SetInformationJobObject", "OpenProcess", "CloseHandle"],
        ),
    ],
)
def test_every_failure_leaves_no_handle_open_and_the_child_running(
    failing: set[str], expected_calls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    kernel32, child = FakeKernel32(failing=failing), FakeChild()
    with caplog.at_level(logging.WARNING):
        tree = lifetime(kernel32).adopt(child)

    assert kernel32.names() == expected_calls
    assert f"{next(iter(failing))} failed with Windows error 5" in caplog.text
    tree.end(Ending.KILL)
    assert child.terminated == 1


def test_ending_a_reaped_child_is_quiet_and_kernel32_is_loaded_once() -> None:
    kernel32, loads = FakeKernel32(failing={"AssignProcessToJobObject"}), []
    windows = lifetime(kernel32, loads)
    windows.adopt(FakeChild()).end(Ending.TERMINATE)
    windows.adopt(FakeChild(gone=True)).end(Ending.KILL)

    assert loads == [1]


def test_an_orphan_is_ended_by_pid_and_a_gone_one_is_quiet() -> None:
    ended: list[tuple[int, int]] = []

    def terminate(pid: int, signum: int) -> None:
        if pid == 2:
            raise PermissionError
        ended.append((pid, signum))

    windows = WindowsLifetime(kernel32=lambda: FakeKernel32(), terminate=terminate)
    windows.kill_orphan(1)
    windows.kill_orphan(2)

    assert [pid for pid, _ in ended] == [1]


@pytest.mark.skipif(sys.platform == "win32", reason="kernel32 loads on Windows")
def test_a_kernel32_that_cannot_load_leaves_the_child_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    child = FakeChild()
    with caplog.at_level(logging.WARNING):
        tree = WindowsLifetime(kernel32=load_kernel32).adopt(child)  # not Windows: it fails
    tree.end(Ending.KILL)

    assert "runs without a job object" in caplog.text and child.terminated == 1
