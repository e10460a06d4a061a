"""The Jobs page: every request the cluster's members handled, newest first by the time it was
received, where it was asked and where it ran, with filters that persist (state, computer,
engine, text), a job's details (double-click, Enter or "Details…"), and a button that clears the
history of finished jobs."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QByteArray, QModelIndex, QSettings, Qt, QTimer
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.broker.state import ServiceState
from app.controllers.jobs import JobsController
from app.models.job_text import TITLES, JobColumn
from app.models.jobs import JobFilter, JobsFilterModel
from app.models.keyed_table import ROW_ROLE
from app.window.job_details import JobDetailsDialog
from app.window.jobs_filters import SETTINGS_PREFIX, JobsFilterBar, load_filter, save_filter
from app.window.widgets import EmptyState, muted_label, page_layout, page_title
from backend.protocol.types.jobs import JobDetails, JobRecord

__all__ = ["JobsFilterBar", "JobsPage", "confirm_clear", "load_filter", "save_filter"]
# While jobs come and go under a state filter (In flight + Running), the table stays this long
# after its last row left before the empty state replaces it: no flicker between requests.
EMPTY_GRACE_MS = 1500
Confirm = Callable[[QWidget, int], bool]  # (parent, finished jobs) -> go ahead?
HEADER_KEY = SETTINGS_PREFIX + "columns"
SHOW_ALL = "Show all jobs"
# Typical contents that set the first column widths (the Error column takes the rest).
COLUMN_SAMPLES = {
    JobColumn.MODEL: "qwen2.5-coder:14b",
    JobColumn.ENGINE: "LM Studio",
    JobColumn.COMPUTER: "workstation → gpu-box",
    JobColumn.STATE: "●  In flight · attempt 2 of 5",
    JobColumn.TIME: "00:00:00",
    JobColumn.DURATION: "00 min 00 s",
}


def confirm_clear(parent: QWidget, finished: int) -> bool:
    """Ask before deleting the history (a modal question)."""
    jobs = "job" if finished == 1 else "jobs"
    answer = QMessageBox.question(
        parent,
        "Clear history",
        f"Delete the {finished} finished {jobs} (completed, failed and cancelled) from the "
        "history? Jobs in flight or running stay.",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


class JobsEmptyState(EmptyState):
    """The centred message shown instead of an empty table, with "Show all jobs" when the
    filters hide every job."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.show_all_button = self.action_button

    def show_message(self, headline: str, message: str, *, show_all: bool) -> None:
        """Say why there is nothing to show."""
        self.show_text(headline, message, SHOW_ALL if show_all else None)


class JobsPage(QWidget):
    """Title, filter bar, the jobs table (or why it is empty), a count, "Details…" and "Clear
    history". A job's details open in a window of their own (one at a time, kept current).

    The filters are saved in ``settings`` as they change and restored when the page is built.
    """

    def __init__(
        self,
        controller: JobsController,
        settings: QSettings,
        parent: QWidget | None = None,
        *,
        confirm: Confirm = confirm_clear,
        empty_grace_ms: int = EMPTY_GRACE_MS,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self._model = controller.model
        self._settings = settings
        self._confirm = confirm
        self.filter_model = JobsFilterModel(self._model, self)
        self.filter_bar = JobsFilterBar(self._model)
        self.table = jobs_table(self.filter_model)
        self.empty_state = JobsEmptyState()
        self.count_label = muted_label()
        self.clear_button = QPushButton("Clear history…")
        self.clear_button.setToolTip("Delete finished jobs; jobs in flight or running stay")
        self.details_button = QPushButton("Details…")
        self.details_button.setToolTip("The selected job's timeline, tokens and error")
        self.details_button.setEnabled(False)
        self.details_dialog: JobDetailsDialog | None = None
        self._empty_grace = QTimer(self)
        self._empty_grace.setSingleShot(True)
        self._empty_grace.setInterval(empty_grace_ms)
        self.body = QStackedWidget()
        self.body.addWidget(self.table)
        self.body.addWidget(self.empty_state)
        self._lay_out()
        self._connect_signals()
        self.filter_model.set_filter(load_filter(settings))
        self.filter_bar.show_filter(self.filter_model.filter)
        self._restore_columns()
        self._refresh()

    def focus_search(self) -> None:
        """Put the keyboard focus in the search field, its text selected (Ctrl+F)."""
        self.filter_bar.search_field.setFocus()
        self.filter_bar.search_field.selectAll()

    def _lay_out(self) -> None:
        header = QHBoxLayout()
        header.addWidget(page_title("Jobs"))
        header.addStretch(1)
        self.filter_bar.search_field.setMinimumWidth(220)
        header.addWidget(self.filter_bar.search_field)
        header.addWidget(self.details_button)
        header.addWidget(self.clear_button)
        layout = page_layout(QVBoxLayout(self))
        layout.addLayout(header)
        layout.addWidget(self.filter_bar)
        layout.addWidget(self.body, 1)
        layout.addWidget(self.count_label)

    def _connect_signals(self) -> None:
        bar = self.filter_bar
        for button in bar.state_buttons.values():
            button.toggled.connect(self._on_filter_bar_edited)
        bar.node_combo.activated.connect(self._on_filter_bar_edited)
        bar.engine_combo.activated.connect(self._on_filter_bar_edited)
        bar.search_field.textChanged.connect(self._on_filter_bar_edited)
        self.empty_state.show_all_button.clicked.connect(self._on_show_all_clicked)
        self.clear_button.clicked.connect(self._on_clear_button_clicked)
        self._model.choices_changed.connect(self._on_model_choices_changed)
        self._model.names_changed.connect(self._on_model_choices_changed)
        shown, jobs = self.filter_model, self._model
        # The proxy drops rows before the source does (rowsAboutToBeRemoved): refresh on both.
        for signal in (
            shown.rowsInserted,
            shown.rowsRemoved,
            shown.modelReset,
            shown.layoutChanged,
            jobs.rowsRemoved,
        ):
            signal.connect(self._refresh)
        self._model.dataChanged.connect(self._refresh_clear_button)
        self._model.dataChanged.connect(self._on_model_data_changed)
        self._controller.connection.state_changed.connect(self._refresh)
        self._empty_grace.timeout.connect(self._on_empty_grace_timeout)
        self.table.activated.connect(self._on_table_activated)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        self.details_button.clicked.connect(self._on_details_button_clicked)
        self._controller.details_loaded.connect(self._on_controller_details_loaded)
        self._controller.details_failed.connect(self._on_controller_details_failed)

    def _restore_columns(self) -> None:
        header = self.table.horizontalHeader()
        state = self._settings.value(HEADER_KEY)
        if isinstance(state, QByteArray) and not state.isEmpty():
            header.restoreState(state)
        header.sectionResized.connect(self._on_header_section_resized)

    def _on_header_section_resized(self, *_args: object) -> None:
        self._settings.setValue(HEADER_KEY, self.table.horizontalHeader().saveState())

    def _on_filter_bar_edited(self, *_args: object) -> None:
        self._use_filter(self.filter_bar.read())

    def _on_show_all_clicked(self) -> None:
        self._use_filter(JobFilter())
        self.filter_bar.show_filter(JobFilter())

    def _on_clear_button_clicked(self) -> None:
        finished = self._model.finished_count()
        if finished and self._confirm(self, finished):
            self._controller.clear_history()

    def _on_model_choices_changed(self) -> None:
        self.filter_bar.refresh_choices(self.filter_model.filter)

    def _use_filter(self, job_filter: JobFilter) -> None:
        self.filter_model.set_filter(job_filter)
        save_filter(self._settings, job_filter)
        self._refresh(settled=True)

    def _on_empty_grace_timeout(self) -> None:
        self._refresh(settled=True)

    # Details ----------------------------------------------------------------------------------

    def open_details(self, job: JobRecord) -> JobDetailsDialog:
        """Show ``job``'s details (the window already open, if any, shows it instead) and ask
        the broker for its timeline."""
        dialog = self.details_dialog
        if dialog is None:
            dialog = JobDetailsDialog(job, self._model.node_label, self)
            self.details_dialog = dialog
        else:
            dialog.show_job(job)
        dialog.show_problem("Reading the timeline…")
        dialog.show()
        dialog.raise_()
        self._controller.load_details(job.key)
        return dialog

    def _on_table_activated(self, index: QModelIndex) -> None:
        job = index.data(ROW_ROLE)
        if isinstance(job, JobRecord):
            self.open_details(job)

    def _on_details_button_clicked(self) -> None:
        self._on_table_activated(self.table.currentIndex())

    def _on_table_selection_changed(self, *_args: object) -> None:
        self.details_button.setEnabled(self.table.selectionModel().hasSelection())

    def _on_controller_details_loaded(self, details: JobDetails) -> None:
        dialog = self.details_dialog
        if dialog is not None and dialog.key == details.job.key:
            dialog.show_details(details)

    def _on_controller_details_failed(self, key: str, message: str) -> None:
        dialog = self.details_dialog
        if dialog is not None and dialog.key == key:
            dialog.show_problem(message)

    def _on_model_data_changed(self, *_args: object) -> None:
        """An open job's details follow its changes (its timeline is read again)."""
        dialog = self.details_dialog
        if dialog is None or not dialog.isVisible():
            return
        job = self._model.get(dialog.key)
        if job is not None and job != dialog.job:
            dialog.show_job(job)
            self._controller.load_details(job.key)

    # The body ---------------------------------------------------------------------------------

    def _refresh(self, *_args: object, settled: bool = False) -> None:
        total, shown = self._model.rowCount(), self.filter_model.rowCount()
        table_shown = self.body.currentWidget() is self.table
        if shown:
            self._empty_grace.stop()
            self.body.setCurrentWidget(self.table)
        elif total and table_shown and not settled:
            # The last matching job just left (a request ended): more may come at once.
            if not self._empty_grace.isActive():
                self._empty_grace.start()
        elif total:
            hidden = "job is" if total == 1 else f"{total} jobs are"
            self.empty_state.show_message(
                "No jobs match these filters",
                f"{hidden.capitalize()} hidden by the state, computer, engine or search filters.",
                show_all=True,
            )
            self.body.setCurrentWidget(self.empty_state)
        else:
            self._show_no_jobs()
        jobs = "job" if total == 1 else "jobs"
        self.count_label.setText(
            ""
            if not total
            else f"{total} {jobs}"
            if shown == total
            else f"{shown} of {total} {jobs}"
        )
        self._refresh_clear_button()

    def _show_no_jobs(self) -> None:
        if self._controller.connection.state is ServiceState.READY:
            self.empty_state.show_message(
                "No jobs yet",
                "Every request that goes through PAIR, on this computer or any computer "
                "paired with it, shows up here while it runs and afterwards.",
                show_all=False,
            )
        else:
            self.empty_state.show_message(
                "No jobs to show",
                "Jobs appear here while the PAIR service is running.",
                show_all=False,
            )
        self.body.setCurrentWidget(self.empty_state)

    def _refresh_clear_button(self, *_args: object) -> None:
        ready = self._controller.connection.state is ServiceState.READY
        self.clear_button.setEnabled(ready and self._model.finished_count() > 0)


def jobs_table(model: JobsFilterModel) -> QTableView:
    """A read-only, row-selecting table with widths that fit its typical contents."""
    table = QTableView()
    table.setModel(model)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    table.setShowGrid(False)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideRight)
    table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
    table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
    metrics = QFontMetrics(table.font())
    rows = table.verticalHeader()
    rows.hide()
    # Fixed heights: Qt never measures 10,000 rows to lay them out.
    rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    rows.setDefaultSectionSize(metrics.height() + 10)
    header = table.horizontalHeader()
    header.setHighlightSections(False)
    header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    header.setStretchLastSection(True)
    header.setMinimumSectionSize(48)
    for column, sample in COLUMN_SAMPLES.items():
        widest = max(metrics.horizontalAdvance(sample), metrics.horizontalAdvance(TITLES[column]))
        header.resizeSection(column, widest + 24)
    return table
