"""The hook that runs the desktop app in this process (the frozen app passes one to ``main``)."""

from __future__ import annotations

from collections.abc import Callable

RunGui = Callable[[list[str]], int]
