"""The welcome dialog's last two steps: get a first model (one that fits this computer, pulled
with its progress in place) and try it in the Playground."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.catalog import format_size
from app.controllers.welcome_model import FirstModelController, FirstModelState
from app.models.errors import SEVERITY_COLOURS
from app.models.models import engine_title
from app.models.pulls import PullRow
from app.window.widgets import muted_label

NO_ENGINE = (
    "Install llama.cpp or start Ollama above, and a model that fits this computer is offered here."
)
TRY_TEXT = (
    "Ask the model something in the Playground: the answer streams from this computer, and "
    "every app can use the same model through the addresses below."
)


def offer_text(state: FirstModelState) -> str:
    """Why this model, and which engine serves it."""
    model = state.model
    if model is None:
        return NO_ENGINE
    fits = "A small chat model"
    if state.memory is not None:
        memory = state.memory
        fits += f" that fits this computer's {format_size(memory.size)} of {memory.kind}"
    return f"{fits}; {engine_title(model.engine)} will serve it."


def status_text(state: FirstModelState) -> str:
    """The line under the model: what the step is doing or what came of it."""
    model, pull = state.model, state.pull
    if state.phase == "pulling":
        return pulling_text(pull)
    if state.phase == "loading" and model is not None:
        return f"Loading it into {engine_title(model.engine)}…"
    if state.phase == "failed":
        return f"Could not get it: {state.error}"
    if state.phase in ("ready", "have_one") and state.ready_engine is not None:
        where = f"{state.ready_model} ({engine_title(state.ready_engine)})"
        if state.phase == "have_one":
            return f"This computer already has a model: {where}. Try it below."
        return f"Ready on this computer: {where}."
    return ""


def pulling_text(pull: PullRow | None) -> str:
    """``Downloading… 448 MB of 1.1 GB`` (the bar beside it shows the percent)."""
    stage = pull.stage if pull is not None and pull.stage else "starting the download"
    text = f"{stage[:1].upper()}{stage[1:]}…"
    if pull is not None and pull.completed is not None and pull.total is not None:
        text += f" {format_size(pull.completed)} of {format_size(pull.total)}"
    return text


class FirstModelBox(QGroupBox):
    """The model offered for this computer, its size, a Pull button and the pull's progress."""

    def __init__(self, controller: FirstModelController, parent: QWidget | None = None) -> None:
        super().__init__("Get a first model", parent)
        self._controller = controller
        self.heading = QLabel()
        self.offer = muted_label()
        self.offer.setWordWrap(True)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.pull_button = QPushButton("Pull")
        self.pull_button.clicked.connect(controller.pull)
        about = QVBoxLayout()
        about.addWidget(self.heading)
        about.addWidget(self.offer)
        top = QHBoxLayout()
        top.addLayout(about, 1)
        top.addWidget(self.pull_button, 0, Qt.AlignmentFlag.AlignVCenter)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the step as the controller sees it now."""
        state = self._controller.state
        phase, model = state.phase, state.model
        offered = model is not None and phase != "have_one"
        self.heading.setVisible(offered)
        if model is not None:
            size = format_size(model.entry.size_bytes)
            self.heading.setText(f"<b>{escape(model.entry.name)}</b> · {size}")
        self.offer.setText(offer_text(state))
        self.offer.setVisible(phase in ("offer", "no_engine", "failed"))
        self.pull_button.setVisible(phase in ("offer", "failed"))
        self.pull_button.setText("Try again" if phase == "failed" else "Pull")
        self.pull_button.setEnabled(state.can_pull)
        self._show_progress(state)
        self.status.setText(status_text(state))
        self.status.setVisible(bool(self.status.text()))
        failed = f"color: {SEVERITY_COLOURS['error'].name()};"
        self.status.setStyleSheet(failed if phase == "failed" else "")

    def _show_progress(self, state: FirstModelState) -> None:
        percent = state.pull.percent if state.pull is not None else None
        busy = state.phase in ("pulling", "loading")
        self.progress.setVisible(busy)
        if percent is None or state.phase == "loading":
            self.progress.setRange(0, 0)  # moving to and fro: no figure to show yet
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(percent))


class TryBox(QGroupBox):
    """The Try it button: opens the Playground with the model ready (closing the dialog)."""

    try_requested = Signal(str)  # the model to select

    def __init__(self, controller: FirstModelController, parent: QWidget | None = None) -> None:
        super().__init__("Try it", parent)
        self._controller = controller
        self.note = muted_label(TRY_TEXT)
        self.note.setWordWrap(True)
        self.try_button = QPushButton("Try it")
        self.try_button.clicked.connect(self._on_try_button_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.try_button, 0, Qt.AlignmentFlag.AlignRight)
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Enable the button once a model is ready (and give it the focus then)."""
        ready = self._controller.state.ready_model
        became_ready = ready is not None and not self.try_button.isEnabled()
        self.try_button.setEnabled(ready is not None)
        self.try_button.setDefault(ready is not None)
        if became_ready:
            self.focus_if_ready()
        self.try_button.setToolTip(
            f"Open the Playground with {ready}" if ready else "Get a first model above first"
        )

    def focus_if_ready(self) -> None:
        """Put the focus on Try it when it can be clicked, so Enter goes on to try the model."""
        if self.try_button.isEnabled():
            self.try_button.setFocus()

    def _on_try_button_clicked(self) -> None:
        ready = self._controller.state.ready_model
        if ready is not None:
            self.try_requested.emit(ready)
