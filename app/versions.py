"""Version strings shown on the Service page and in the About box."""

from __future__ import annotations

import platform

import PySide6
from PySide6.QtCore import qVersion

from backend.common import buildinfo


def app_version() -> str:
    """This app's version (the one ``pair --version`` prints; also right in a frozen app)."""
    return buildinfo.VERSION


def with_commit(version: str, commit: str | None) -> str:
    """``0.1.0 (commit 1a2b3c4)``, or the version alone when the commit is not known."""
    return f"{version} (commit {commit})" if commit else version


def python_version() -> str:
    """The running Python's version and implementation."""
    return f"{platform.python_version()} ({platform.python_implementation()})"


def qt_version() -> str:
    """The Qt runtime and the PySide6 binding versions."""
    return f"Qt {qVersion()}, PySide6 {PySide6.__version__}"
