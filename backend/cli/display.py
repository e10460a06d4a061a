"""Whether this computer can show the desktop app (``pair`` and ``pair demo`` ask)."""

from __future__ import annotations

import os
import sys

# Qt platforms that draw without a display server (QT_QPA_PLATFORM=offscreen in CI).
HEADLESS_QT_PLATFORMS = ("offscreen", "minimal", "vnc")


def has_display() -> bool:
    """Whether a GUI can open here."""
    if sys.platform in ("win32", "darwin"):
        return True
    if os.environ.get("QT_QPA_PLATFORM") in HEADLESS_QT_PLATFORMS:
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
