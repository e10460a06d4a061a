"""CPU, memory and operating-system readings through psutil and the platform (blocking calls)."""

from __future__ import annotations

import contextlib
import logging
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import psutil

from backend.protocol.types.nodes import NodeCpu, NodeMemory, NodeOs

log = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")


def read_os() -> NodeOs:
    """System, release and machine as the platform names them; empty answers are omitted."""
    return NodeOs(
        system=platform.system() or None,
        release=platform.release() or None,
        machine=platform.machine() or None,
    )


def cpu_name(
    cpuinfo: Path = CPUINFO,
    *,
    sys_platform: str = sys.platform,
    sysctl: Callable[[str], str | None] | None = None,
) -> str | None:
    """The CPU's marketing name, or None where the platform does not say."""
    if sys_platform == "darwin":
        return (sysctl or read_sysctl)("machdep.cpu.brand_string")
    if sys_platform.startswith("linux"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            return parse_cpuinfo_name(cpuinfo.read_text())
    return platform.processor() or None


def parse_cpuinfo_name(text: str) -> str | None:
    """The first ``model name`` (x86) or ``Model``/``Hardware`` (ARM) of ``/proc/cpuinfo``."""
    for key in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            name, separator, value = line.partition(":")
            if separator and name.strip() == key and value.strip():
                return value.strip()
    return None


def busy_percent(before: Any, after: Any) -> float | None:
    """CPU utilisation between two ``psutil.cpu_times()`` samples, as psutil computes it.

    None when no time passed between them (no measurement is not a measurement of zero).
    """
    total = _total_time(after) - _total_time(before)
    if total <= 0:
        return None
    busy = (_total_time(after) - _idle_time(after)) - (_total_time(before) - _idle_time(before))
    return round(min(100.0, max(0.0, 100.0 * busy / total)), 1)


class HostReader(msgspec.Struct):
    """Reads CPU and memory; keeps the previous CPU times, so utilisation needs two samples."""

    name: str | None = None
    cpu_times: Callable[[], Any] = psutil.cpu_times
    _before: Any = None

    def cpu(self) -> NodeCpu:
        """Name, logical cores and utilisation since the previous call (omitted on the first)."""
        utilization: float | None = None
        try:
            now = self.cpu_times()
        except (OSError, RuntimeError) as exc:
            log.debug("CPU times unavailable: %s", exc)
            now = None
        if now is not None and self._before is not None:
            utilization = busy_percent(self._before, now)
        self._before = now
        cores = psutil.cpu_count()
        return NodeCpu(
            name=self.name, cores=cores if cores else None, utilization_percent=utilization
        )

    def memory(self) -> NodeMemory:
        """Total bytes and bytes in use (total minus what applications could still have)."""
        try:
            memory = psutil.virtual_memory()
        except (OSError, RuntimeError) as exc:
            log.debug("memory figures unavailable: %s", exc)
            return NodeMemory()
        if memory.total <= 0:
            return NodeMemory()
        return NodeMemory(total_bytes=memory.total, used_bytes=memory.total - memory.available)


def _total_time(times: Any) -> float:
    total = float(sum(times))
    # On Linux guest time is already counted in user and nice time.
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    return total


def _idle_time(times: Any) -> float:
    return float(getattr(times, "idle", 0.0) + getattr(times, "iowait", 0.0))


def run_output(argv: Sequence[str]) -> str | None:
    """What ``argv`` writes to stdout, or None when it cannot run (blocking, 5 s at most)."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def read_sysctl(name: str, run: Callable[[Sequence[str]], str | None] = run_output) -> str | None:
    """A BSD/macOS kernel variable's value as ``sysctl -n`` prints it; None when unset."""
    output = run(["/usr/sbin/sysctl", "-n", name])
    if output is None:
        return None
    return output.strip() or None
