"""Tying a child's life to the broker's: one contract (``base.py``), one implementation per OS,
chosen here and only here."""

from __future__ import annotations

import functools
import sys

from backend.core.lifetime.base import (
    ChildLifetime,
    ChildTree,
    Ending,
    SpawnOptions,
    StartedChild,
)

__all__ = [
    "ChildLifetime",
    "ChildTree",
    "Ending",
    "SpawnOptions",
    "StartedChild",
    "child_lifetime",
    "for_platform",
]


def for_platform(platform: str) -> ChildLifetime:
    """The lifetime for ``platform`` (a ``sys.platform`` value); other POSIX systems get
    Linux's, whose parent-death preexec only Linux has, so the preexec is skipped there."""
    # Imported here so that a process loads only its own OS's module (workers import the
    # POSIX preexec through ``backend.core.processes``).
    if platform == "win32":
        from backend.core.lifetime.windows import WindowsLifetime

        return WindowsLifetime()
    if platform == "darwin":
        from backend.core.lifetime.macos import MacLifetime

        return MacLifetime()
    from backend.core.lifetime.posix import LinuxLifetime

    return LinuxLifetime(parent_death=platform.startswith("linux"))


@functools.cache
def child_lifetime() -> ChildLifetime:
    """This OS's lifetime (one per process: Windows loads kernel32 once)."""
    return for_platform(sys.platform)
