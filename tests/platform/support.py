"""What the platform tests share: the marker that skips a module off its OS, saying which OS it
needs, and waiting for processes to be gone."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable

import psutil
import pytest

OS_NAMES = {"win32": "Windows", "darwin": "macOS"}


def only_on(platform: str, needs: str) -> pytest.MarkDecorator:
    """Skip unless ``sys.platform`` is ``platform``; the reason names the OS and what it has."""
    name = OS_NAMES.get(platform, platform)
    return pytest.mark.skipif(
        sys.platform != platform, reason=f"{name} only ({needs}); this is {sys.platform}"
    )


def still_running(processes: Iterable[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after up to ``seconds`` (zombies count as gone)."""
    _gone, alive = psutil.wait_procs(list(processes), timeout=seconds)
    return [process for process in alive if _running(process)]


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_all(processes: Iterable[psutil.Process]) -> None:
    """Kill those of ``processes`` still running (each one this test started), by PID."""
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
