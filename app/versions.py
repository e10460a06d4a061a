"""Version strings shown on the Service page."""

from __future__ import annotations

import platform
from importlib import metadata

import PySide6
from PySide6.QtCore import qVersion

DISTRIBUTION = "pair"


def app_version() -> str:
    """The installed ``pair`` distribution's version, or a note that this runs from source."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "run from source"


def python_version() -> str:
    """The running Python's version and implementation."""
    return f"{platform.python_version()} ({platform.python_implementation()})"


def qt_version() -> str:
    """The Qt runtime and the PySide6 binding versions."""
    return f"Qt {qVersion()}, PySide6 {PySide6.__version__}"
