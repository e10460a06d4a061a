"""Windows: each child in a Job Object that kills everything in it when its last handle closes.

The broker holds the job's only handle (not inheritable) until it has reaped the child, so when
the broker dies, for whatever reason, the kernel closes the handle and kills the child and every
process it started. The child gets its own process group (Ctrl+C in the broker's console does not
reach it) and no console window. Windows has no SIGTERM: asking a child to stop ends its main
process (``TerminateProcess``, as ``Popen.terminate`` does); killing it ends the whole job.
Every kernel32 call goes through an injected object, so the exact calls are tested on any OS.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from backend.core.lifetime.base import ChildTree, Ending, SpawnOptions, StartedChild

log = logging.getLogger(__name__)

CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9  # the JOBOBJECTINFOCLASS value
PROCESS_TERMINATE = 0x0001
PROCESS_SET_QUOTA = 0x0100  # with PROCESS_TERMINATE: what AssignProcessToJobObject needs
KILLED_EXIT_CODE = 1

Handle = int


class IoCounters(ctypes.Structure):
    """``IO_COUNTERS``."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class BasicLimitInformation(ctypes.Structure):
    """``JOBOBJECT_BASIC_LIMIT_INFORMATION``."""

    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class ExtendedLimitInformation(ctypes.Structure):
    """``JOBOBJECT_EXTENDED_LIMIT_INFORMATION``."""

    _fields_ = [
        ("BasicLimitInformation", BasicLimitInformation),
        ("IoInfo", IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class Kernel32(Protocol):
    """The kernel32 functions used here, as ctypes calls them (a NULL handle is None)."""

    def CreateJobObjectW(self, attributes: None, name: None) -> Handle | None:  # noqa: N802
        """A new, unnamed job object."""
        ...

    def SetInformationJobObject(  # noqa: N802
        self, job: Handle, info_class: int, info: object, length: int
    ) -> int:
        """Set the job's limits."""
        ...

    def OpenProcess(self, access: int, inherit: bool, pid: int) -> Handle | None:  # noqa: N802
        """A handle on a running process."""
        ...

    def AssignProcessToJobObject(self, job: Handle, process: Handle) -> int:  # noqa: N802
        """Put a process (and what it starts from now on) in the job."""
        ...

    def TerminateJobObject(self, job: Handle, exit_code: int) -> int:  # noqa: N802
        """End every process in the job."""
        ...

    def CloseHandle(self, handle: Handle) -> int:  # noqa: N802
        """Close a handle."""
        ...


def load_kernel32() -> Kernel32:
    """The real kernel32 with its signatures declared (64-bit handles stay whole)."""
    if sys.platform == "win32":
        from ctypes import wintypes

        dll = ctypes.WinDLL("kernel32", use_last_error=True)
        handle, dword, bool_ = wintypes.HANDLE, wintypes.DWORD, wintypes.BOOL
        signatures = {
            "CreateJobObjectW": ([ctypes.c_void_p, wintypes.LPCWSTR], handle),
            "SetInformationJobObject": ([handle, ctypes.c_int, ctypes.c_void_p, dword], bool_),
            "OpenProcess": ([dword, bool_, dword], handle),
            "AssignProcessToJobObject": ([handle, handle], bool_),
            "TerminateJobObject": ([handle, ctypes.c_uint], bool_),
            "CloseHandle": ([handle], bool_),
        }
        for name, (argtypes, restype) in signatures.items():
            function = getattr(dll, name)
            function.argtypes, function.restype = argtypes, restype
        return cast(Kernel32, dll)
    raise OSError("kernel32 is Windows only")


def last_windows_error() -> int:
    """The calling thread's last Windows error as ctypes saved it (0 off Windows)."""
    get: Callable[[], int] = getattr(ctypes, "get_last_error", lambda: 0)
    return get()


def kill_on_close_limits() -> ExtendedLimitInformation:
    """Limits that kill every process in the job when its last handle closes."""
    info = ExtendedLimitInformation()
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    return info


@dataclass
class JobTree:
    """A child in its own job (``job`` None: putting it in one failed; only the child itself
    can be ended, through its process handle)."""

    child: StartedChild
    job: Handle | None
    kernel32: Kernel32 | None = field(repr=False)

    def end(self, ending: Ending) -> None:
        """KILL with a job: every process in it; otherwise the main process only."""
        if ending is Ending.KILL and self.job is not None and self.kernel32 is not None:
            if not self.kernel32.TerminateJobObject(self.job, KILLED_EXIT_CODE):
                code = last_windows_error()
                log.debug("TerminateJobObject for pid %d: error %d", self.child.pid, code)
            return
        # Gone already: reaped (ProcessLookupError) or exited (access denied).
        with contextlib.suppress(OSError):
            self.child.terminate()  # TerminateProcess

    def release(self) -> None:
        """Close the job's handle; the kernel kills whatever is still in it."""
        job, self.job = self.job, None
        if job is not None and self.kernel32 is not None:
            self.kernel32.CloseHandle(job)


@dataclass
class WindowsLifetime:
    """A kill-on-close job per child, its own process group, no console window."""

    kernel32: Callable[[], Kernel32] = field(default=load_kernel32, repr=False)
    terminate: Callable[[int, int], None] = field(default=os.kill, repr=False)
    last_error: Callable[[], int] = field(default=last_windows_error, repr=False)
    _loaded: Kernel32 | None = field(default=None, init=False, repr=False)

    def command(self, argv: Sequence[str], *, ignore_sigpipe: bool = False) -> list[str]:
        """The argv unchanged (Windows has no SIGPIPE)."""
        return list(argv)

    def spawn_options(self, *, ignore_sigpipe: bool = False) -> SpawnOptions:
        """Creation flags only (Windows refuses ``preexec_fn``)."""
        return SpawnOptions(creationflags=CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW)

    def adopt(self, child: StartedChild) -> ChildTree:
        """Put ``child`` in a new kill-on-close job; on failure log it and let the child run
        untied (the next broker's ledger reaps it if it outlives us)."""
        try:
            kernel32 = self._kernel32()
            job = self._create_job(kernel32)
        except OSError as error:
            log.warning("pid %d runs without a job object: %s", child.pid, error)
            return JobTree(child, None, None)
        try:
            self._assign(kernel32, job, child.pid)
        except OSError as error:
            log.warning("pid %d runs without a job object: %s", child.pid, error)
            kernel32.CloseHandle(job)
            return JobTree(child, None, kernel32)
        return JobTree(child, job, kernel32)

    def kill_orphan(self, pid: int) -> None:
        """End the orphan's main process (TerminateProcess): its job, if it had one, died
        with its broker and took its tree along."""
        with contextlib.suppress(OSError):
            self.terminate(pid, signal.SIGTERM)

    def _kernel32(self) -> Kernel32:
        if self._loaded is None:
            self._loaded = self.kernel32()
        return self._loaded

    def _create_job(self, kernel32: Kernel32) -> Handle:
        job = kernel32.CreateJobObjectW(None, None)
        if not job:
            raise self._error("CreateJobObjectW")
        info = kill_on_close_limits()
        size = ctypes.sizeof(info)
        if not kernel32.SetInformationJobObject(
            job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.pointer(info), size
        ):
            error = self._error("SetInformationJobObject")
            kernel32.CloseHandle(job)
            raise error
        return job

    def _assign(self, kernel32: Kernel32, job: Handle, pid: int) -> None:
        process = kernel32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        if not process:
            raise self._error("OpenProcess")
        try:
            if not kernel32.AssignProcessToJobObject(job, process):
                raise self._error("AssignProcessToJobObject")
        finally:
            kernel32.CloseHandle(process)

    def _error(self, call: str) -> OSError:
        code = self.last_error()
        return OSError(code, f"{call} failed with Windows error {code}")
