"""The progress line of ``pair pull`` and ``pair engine install|update``, drawn from the pushes
of the engine stream: for this node its ``pull_progressed`` and ``install_progressed`` events,
for another member the ``pulls`` and ``installs`` of its ``member_changed`` events, so that a
member's pull or install looks exactly like the same one here."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from backend.protocol import methods
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import (
    EngineEvent,
    InstallProgress,
    InstallProgressed,
    MemberEnginesChanged,
    PullProgress,
    PullProgressed,
)

Progress = PullProgress | InstallProgress
WIDTH = 100


class ProgressBar:
    """Draws the progress of one pull of ``model`` into ``engine``, or with no ``model`` of one
    install (or update) of ``engine``, on this node or on the member ``node``."""

    def __init__(
        self,
        engine: EngineName,
        model: str | None = None,
        out: TextIO | None = None,
        node: NodeId | None = None,
    ) -> None:
        self.engine, self.model, self.node = engine, model, node
        self._out = out if out is not None else sys.stdout  # as it is now, not at import
        self._drawn: Progress | None = None

    def on_push(self, method: str, params: Any) -> None:
        """The CLI connection's push hook: draw this bar's progress, ignore the rest."""
        if method != methods.ENGINE_EVENT.name:
            return
        progress = self.progress_in(methods.ENGINE_EVENT.decode(params))
        if progress is None or progress == self._drawn:
            return  # a member's state repeats its pulls and installs with every other change
        self._drawn = progress
        self._out.write("\r" + progress_line(progress)[:WIDTH].ljust(WIDTH))
        self._out.flush()

    def progress_in(self, event: EngineEvent) -> Progress | None:
        """This bar's progress as ``event`` tells it, if it does."""
        found: list[Progress] = []
        if self.node is None and isinstance(event, PullProgressed | InstallProgressed):
            found = [event.progress]
        elif isinstance(event, MemberEnginesChanged) and event.member.node_id == self.node:
            found = [*event.member.pulls, *event.member.installs]
        return next((progress for progress in found if self._follows(progress)), None)

    def _follows(self, progress: Progress) -> bool:
        if isinstance(progress, PullProgress):
            return (progress.engine, progress.model) == (self.engine, self.model)
        return self.model is None and progress.engine == self.engine

    def end_line(self) -> None:
        """End the bar's line, so what follows starts on a line of its own."""
        if self._drawn is not None:
            self._out.write("\n")
            self._out.flush()


def progress_line(progress: Progress) -> str:
    """A 30-character bar, the percentage and the stage (the stage alone when unmeasured)."""
    if progress.percent is None:
        return progress.stage
    filled = int(progress.percent / 100 * 30)
    return f"[{'#' * filled}{'.' * (30 - filled)}] {progress.percent:5.1f}%  {progress.stage}"
