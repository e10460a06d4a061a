"""Watching every grab a look renderer makes: which widgets it saved, whether each was drawn
dark, and every label on them that does not read against its background."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from PySide6.QtWidgets import QWidget

from app.window.theme import is_dark

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

render_looks = importlib.import_module("render_looks")  # a script, not a package


class Grabs:
    """What the grabs showed: widget class names, darkness seen, unreadable labels."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.darkness: set[bool] = set()
        self.problems: list[str] = []

    def check(self, widget: QWidget) -> None:
        """Record one grabbed widget."""
        self.names.add(type(widget).__name__)
        self.darkness.add(is_dark(widget.palette()))
        self.problems.extend(
            f"{type(widget).__name__}: {p}" for p in render_looks.unreadable_labels(widget)
        )


async def watch_grabs(render: Callable[[], Awaitable[None]]) -> Grabs:
    """Run ``render`` and return what each of its grabs showed."""
    grabs = Grabs()
    with render_looks.checking_grabs(grabs.check):
        await render()
    return grabs
