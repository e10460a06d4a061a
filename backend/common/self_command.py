"""The command that runs PAIR itself, from a source checkout or from a frozen app."""

from __future__ import annotations

import sys


def is_frozen() -> bool:
    """Whether this process is a frozen app (PyInstaller): ``sys.executable`` is ``pair``."""
    return bool(getattr(sys, "frozen", False))


def self_argv(*args: str) -> list[str]:
    """``pair ARGS...`` as an argv: ``python -m backend ARGS`` from a checkout, the frozen
    executable itself with ``ARGS`` from a frozen app (which has no ``-m``)."""
    if is_frozen():
        return [sys.executable, *args]
    return [sys.executable, "-m", "backend", *args]
