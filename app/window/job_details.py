"""One job's details: its facts (client API and client, where it ran, attempts, time to first
token, tokens and tokens/s), its timeline and its whole error, every text selectable."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.models.job_details_text import detail_rows, timeline_rows
from app.models.job_text import NodeLabel, model_name
from app.models.jobs import state_dot
from app.window.look import State
from app.window.theme import is_dark
from app.window.widgets import (
    DIALOG_MARGINS,
    SPACE_SECTION,
    SPACE_TIGHT,
    muted_label,
    page_title,
    section_title,
    tint,
)
from backend.protocol.types.jobs import JobDetails, JobRecord, JobStep

TIMELINE_TITLES = ("Time", "Since received", "What happened")
READING = "Reading the timeline…"
# The facts in two columns: who and where on the left, when and how much on the right; the
# job's key (long) on a row of its own below.
LEFT_FACTS = 7
KEY_FACT = "Job"


class JobDetailsDialog(QDialog):
    """A window on one job: built from the list's record at once, its timeline filled in when
    ``show_details`` brings it (``show_problem`` says why it could not be read)."""

    def __init__(
        self,
        job: JobRecord,
        label: NodeLabel,
        parent: QWidget | None = None,
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(parent)
        self._label = label
        self._now = now
        self._steps: Sequence[JobStep] = ()
        self.job = job
        self.setMinimumSize(QSize(680, 560))
        self.state_icon = QLabel()
        self.title = page_title("")
        self.facts = QGridLayout()
        self.facts.setHorizontalSpacing(SPACE_SECTION)
        self.facts.setVerticalSpacing(SPACE_TIGHT)
        self.facts.setColumnStretch(1, 1)
        self.facts.setColumnStretch(3, 1)
        self.fact_values: dict[str, QLabel] = {}
        self.timeline = _timeline_view()
        self.status = muted_label(READING)
        self.error_title = section_title("Error")
        self.error = QPlainTextEdit()
        self.error.setReadOnly(True)
        tint(self.error, State.ERROR)
        self.error.setMaximumHeight(110)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self._lay_out(buttons)
        self.show_job(job)

    @property
    def key(self) -> str:
        """The job's key."""
        return self.job.key

    def show_job(self, job: JobRecord) -> None:
        """Show ``job`` as it is now (the timeline already read stays)."""
        self.job = job
        self.setWindowTitle(f"Job details: {model_name(job.model)}")
        self._draw_state_dot()
        self.title.setText(model_name(job.model))
        self._fill_facts(detail_rows(job, self._label, self._now()))
        self.error.setPlainText(job.error or "")
        self.error_title.setVisible(bool(job.error))
        self.error.setVisible(bool(job.error))
        self._fill_timeline()

    def changeEvent(self, event: QEvent) -> None:
        """Draw the state's dot again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._draw_state_dot()

    def _draw_state_dot(self) -> None:
        dot = state_dot(self.job.state, is_dark(self.palette()))
        self.state_icon.setPixmap(dot.pixmap(14, 14))

    def show_details(self, details: JobDetails) -> None:
        """Show the job and the timeline the broker keeps for it."""
        self._steps = details.timeline
        self.status.setText(
            ""
            if details.timeline
            else "Only the start and end are known here: the computer "
            "that received this job keeps its full timeline."
        )
        self.status.setVisible(not details.timeline)
        self.show_job(details.job)

    def show_problem(self, message: str) -> None:
        """Say why the timeline could not be read (what the list knows stays shown)."""
        self.status.setText(message)
        self.status.setVisible(True)

    def _lay_out(self, buttons: QDialogButtonBox) -> None:
        header = QHBoxLayout()
        header.addWidget(self.state_icon)
        header.addWidget(self.title, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*DIALOG_MARGINS)
        layout.setSpacing(SPACE_SECTION)
        layout.addLayout(header)
        layout.addLayout(self.facts)
        layout.addWidget(section_title("Timeline"))
        layout.addWidget(self.timeline, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.error_title)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _fill_facts(self, rows: Sequence[tuple[str, str]]) -> None:
        if not self.fact_values:
            for position, (name, _) in enumerate(rows):
                row, column = _fact_cell(position, len(rows))
                title = muted_label(f"{name}:")
                title.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
                value = _selectable("")
                self.facts.addWidget(title, row, column)
                span = 3 if name == KEY_FACT else 1
                self.facts.addWidget(value, row, column + 1, 1, span)
                self.fact_values[name] = value
        for name, text in rows:
            self.fact_values[name].setText(text)

    def _fill_timeline(self) -> None:
        self.timeline.clear()
        for row in timeline_rows(self.job, self._steps, self._label, self._now()):
            item = QTreeWidgetItem(list(row))
            item.setToolTip(2, row[2])
            self.timeline.addTopLevelItem(item)
        for column in range(len(TIMELINE_TITLES) - 1):
            self.timeline.resizeColumnToContents(column)


def _fact_cell(position: int, count: int) -> tuple[int, int]:
    """The grid row and column of the ``position``-th fact of ``count`` (the last: the key)."""
    if position == count - 1:
        return LEFT_FACTS, 0
    if position < LEFT_FACTS:
        return position, 0
    return position - LEFT_FACTS, 2


def _selectable(text: str) -> QLabel:
    label = QLabel(text)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    # Top-aligned like its title: a row as tall as a wrapped neighbour keeps both on one line.
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    return label


def _timeline_view() -> QTreeWidget:
    view = QTreeWidget()
    view.setColumnCount(len(TIMELINE_TITLES))
    view.setHeaderLabels(list(TIMELINE_TITLES))
    view.setRootIsDecorated(False)
    view.setUniformRowHeights(True)
    view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.setWordWrap(False)
    return view
