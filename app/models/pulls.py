"""Pulls in progress on this node and the other members, as the Models page lists them."""

from __future__ import annotations

import msgspec
from PySide6.QtCore import QObject

from app.catalog import format_size
from app.models.keyed_table import Column, KeyedTableModel
from app.models.models import engine_title
from app.pending import PendingKey
from app.window.look import State, state_colour
from backend.protocol.types.base import EngineName, NodeId


class PullRow(msgspec.Struct, frozen=True):
    """A pull on this node or on another member (``node``, ``node_name``) as its last progress
    step said; ``error`` once it failed."""

    node: NodeId
    engine: EngineName
    model: str
    stage: str = ""
    percent: float | None = None
    completed: int | None = None
    total: int | None = None
    error: str | None = None
    node_name: str = ""
    local: bool = True

    @property
    def key(self) -> PendingKey:
        """(node, engine, model): the pending-store key of the pull."""
        return PendingKey(self.node, self.engine, self.model)

    @property
    def failed(self) -> bool:
        """The pull ended with an error (the row stays until dismissed)."""
        return self.error is not None

    def progress_text(self) -> str:
        """``40 %`` and, when the engine says, ``0.8 GB of 2.0 GB``."""
        if self.failed:
            return "Failed"
        parts = [] if self.percent is None else [f"{self.percent:.0f} %"]
        if self.completed is not None and self.total is not None:
            parts.append(f"{format_size(self.completed)} of {format_size(self.total)}")
        return " · ".join(parts)


def _pull_computer(pull: PullRow) -> str:
    return "This computer" if pull.local else pull.node_name


PULL_COLUMNS: tuple[Column[PullRow], ...] = (
    Column("Model", lambda pull: pull.model),
    Column("Engine", lambda pull: engine_title(pull.engine)),
    Column("Computer", _pull_computer),
    Column(
        "Stage",
        lambda pull: pull.error or pull.stage,
        tooltip=lambda pull: pull.error or pull.stage,
        foreground=lambda pull: state_colour(State.ERROR) if pull.failed else None,
    ),
    Column("Progress", PullRow.progress_text),
)


class PullsModel(KeyedTableModel[PendingKey, PullRow]):
    """Pulls on every member keyed by (node, engine, model), in the order they started."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(PULL_COLUMNS, lambda pull: pull.key, parent)

    def active(self, key: PendingKey) -> bool:
        """Whether the pull of ``key`` is running (not failed)."""
        pull = self.get(key)
        return pull is not None and not pull.failed


# Ollama's registry errors as Ollama words them, and what they mean to someone pulling.
_OLLAMA_ERRORS: tuple[tuple[str, str], ...] = (
    ("file does not exist", "Ollama has no model called {model}: check its name on ollama.com."),
    ("manifest unknown", "Ollama has no model called {model}: check its name on ollama.com."),
    ("no such host", "Ollama could not reach its registry: is this computer online?"),
    ("connection refused", "Ollama could not reach its registry: is this computer online?"),
    ("i/o timeout", "Ollama's registry did not answer in time: try again in a moment."),
    ("no space left", "There is not enough free disk space for {model}."),
)


def plain_pull_error(pull: PullRow) -> str:
    """A failed pull's reason in a sentence: Ollama's known registry errors are reworded,
    others are shown as the engine said them."""
    error = pull.error or ""
    if pull.engine == "ollama":
        lowered = error.casefold()
        for marker, sentence in _OLLAMA_ERRORS:
            if marker in lowered:
                return sentence.format(model=pull.model)
    return error


def finished_text(engine: EngineName, model: str, where: str) -> str:
    """The line a finished pull leaves: where the model is and how to use it."""
    title = engine_title(engine)
    if engine == "llamacpp":
        use = f"Load it under “On your computers” to serve it ({title} serves one at a time)."
    else:
        use = f"Any app can now ask PAIR for the model “{model}”."
    return f"{model} is ready on {where} ({title}). {use}"
