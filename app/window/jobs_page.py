"""The Jobs page: every request the cluster's members handled, newest first, where it was asked
and where it ran, with filters that persist (state, computer, engine, text), and a button that
clears the history of finished jobs."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.broker.state import ServiceState
from app.controllers.jobs import JobsController
from app.models.job_text import ALL_STATES, STATE_LABELS, TITLES, JobColumn, engine_label
from app.models.jobs import JobFilter, JobsFilterModel, JobsModel, state_dot
from app.window.widgets import muted_label, page_title
from backend.protocol.types.jobs import JobState

CHIP_STYLE = """
QPushButton {
    padding: 3px 10px; border: 1px solid palette(mid); border-radius: 11px;
    background: palette(base); color: palette(text);
}
QPushButton:hover { border-color: palette(highlight); }
QPushButton:checked {
    background: palette(highlight); color: palette(highlighted-text);
    border-color: palette(highlight);
}
"""
Confirm = Callable[[QWidget, int], bool]  # (parent, finished jobs) -> go ahead?
SETTINGS_PREFIX = "jobs/"
HEADER_KEY = SETTINGS_PREFIX + "columns"
# Typical contents that set the first column widths (the Error column takes the rest).
COLUMN_SAMPLES = {
    JobColumn.STATE: "●  Cancelled",
    JobColumn.MODEL: "qwen2.5-coder:14b",
    JobColumn.ENGINE: "LM Studio",
    JobColumn.COMPUTER: "workstation → gpu-box",
    JobColumn.TIME: "In flight since 00:00:00 (attempt 2)",
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


def load_filter(settings: QSettings) -> JobFilter:
    """The filter saved by ``save_filter`` (unknown states are dropped)."""

    def text(name: str) -> str:
        value = settings.value(SETTINGS_PREFIX + name, "")
        return value if isinstance(value, str) else ""

    states = frozenset(state for state in ALL_STATES if state in text("states").split(","))
    return JobFilter(
        states=states, node=text("node") or None, engine=text("engine") or None, text=text("search")
    )


def save_filter(settings: QSettings, job_filter: JobFilter) -> None:
    """Remember the filter for the next start."""
    values = {
        "states": ",".join(state for state in ALL_STATES if state in job_filter.states),
        "node": job_filter.node or "",
        "engine": job_filter.engine or "",
        "search": job_filter.text,
    }
    for name, value in values.items():
        settings.setValue(SETTINGS_PREFIX + name, value)


class JobsFilterBar(QWidget):
    """State toggles (none checked shows every state), node and engine combos, a search field."""

    def __init__(self, model: JobsModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self.state_buttons: dict[JobState, QPushButton] = {}
        self.node_combo = QComboBox()
        self.node_combo.setToolTip("Jobs asked on, sent to or run on one computer")
        self.engine_combo = QComboBox()
        for combo, characters in ((self.node_combo, 16), (self.engine_combo, 9)):
            # A steady width: long node names elide instead of pushing the search field away.
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(characters)
        self.search_field = QLineEdit()
        self.search_field.setPlaceholderText("Search model or error")
        self.search_field.setClearButtonEnabled(True)
        self.search_field.setMinimumWidth(160)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        for state in ALL_STATES:
            button = QPushButton(state_dot(state), STATE_LABELS[state])
            button.setIconSize(QSize(12, 12))
            button.setCheckable(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setToolTip(f"Show {STATE_LABELS[state].lower()} jobs (none selected: all)")
            self.state_buttons[state] = button
            layout.addWidget(button)
        layout.addSpacing(10)
        layout.addWidget(self.node_combo)
        layout.addWidget(self.engine_combo)
        layout.addStretch(1)
        # The search field sits in the page's header row (more room there); it is still ours.
        # Chips: Fusion's checked buttons differ from unchecked ones by a shade only.
        self.setStyleSheet(CHIP_STYLE)

    def read(self) -> JobFilter:
        """The filter the controls show."""
        checked = (state for state, button in self.state_buttons.items() if button.isChecked())
        return JobFilter(
            states=frozenset(checked),
            node=self.node_combo.currentData(),
            engine=self.engine_combo.currentData(),
            text=self.search_field.text(),
        )

    def show_filter(self, job_filter: JobFilter) -> None:
        """Set the controls to ``job_filter`` without emitting their change signals."""
        for state, button in self.state_buttons.items():
            button.blockSignals(True)
            button.setChecked(state in job_filter.states)
            button.blockSignals(False)
        self.refresh_choices(job_filter)
        self.search_field.blockSignals(True)
        self.search_field.setText(job_filter.text)
        self.search_field.blockSignals(False)

    def refresh_choices(self, job_filter: JobFilter) -> None:
        """Offer this computer, each member, and the other nodes and the engines among the jobs
        (and the ones selected, even without)."""
        model = self._model
        own = [model.self_id] if model.self_id is not None else []
        members = [node for node in model.members() if node not in own]
        known = {*own, *members}
        others = set(model.nodes()) | _present(job_filter.node)
        rest = sorted(others - known, key=self._node_label)
        ordered = [*own, *members, *rest]
        _fill(self.node_combo, "All computers", [(self._node_label(n), n) for n in ordered])
        _select(self.node_combo, job_filter.node)
        engines = sorted(set(self._model.engines()) | _present(job_filter.engine))
        _fill(self.engine_combo, "All engines", [(engine_label(e), e) for e in engines])
        _select(self.engine_combo, job_filter.engine)

    def _node_label(self, node_id: str) -> str:
        label = self._model.node_label(node_id)
        return f"{label} (this computer)" if self._model.is_self(node_id) else label


def _present(value: str | None) -> set[str]:
    return set() if value is None else {value}


def _fill(combo: QComboBox, everything: str, items: list[tuple[str, str]]) -> None:
    combo.blockSignals(True)
    combo.clear()
    combo.addItem(everything, None)
    for label, value in items:
        combo.addItem(label, value)
    combo.blockSignals(False)


def _select(combo: QComboBox, value: str | None) -> None:
    combo.blockSignals(True)
    combo.setCurrentIndex(max(0, combo.findData(value)) if value is not None else 0)
    combo.blockSignals(False)


class JobsEmptyState(QWidget):
    """The centred message shown instead of an empty table, with "Show all jobs" when the
    filters hide every job."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.headline = QLabel()
        self.headline.setAlignment(Qt.AlignmentFlag.AlignCenter)
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        font.setBold(True)
        self.headline.setFont(font)
        self.message = muted_label()
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.show_all_button = QPushButton("Show all jobs")
        self.show_all_button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.headline)
        layout.addSpacing(6)
        layout.addWidget(self.message)
        layout.addSpacing(12)
        layout.addWidget(self.show_all_button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(2)

    def show_message(self, headline: str, message: str, *, show_all: bool) -> None:
        """Say why there is nothing to show."""
        self.headline.setText(headline)
        self.message.setText(message)
        self.show_all_button.setVisible(show_all)


class JobsPage(QWidget):
    """Title, filter bar, the jobs table (or why it is empty), a count and "Clear history".

    The filters are saved in ``settings`` as they change and restored when the page is built.
    """

    def __init__(
        self,
        controller: JobsController,
        settings: QSettings,
        parent: QWidget | None = None,
        *,
        confirm: Confirm = confirm_clear,
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
        self.body = QStackedWidget()
        self.body.addWidget(self.table)
        self.body.addWidget(self.empty_state)
        self._lay_out()
        self._connect_signals()
        self.filter_model.set_filter(load_filter(settings))
        self.filter_bar.show_filter(self.filter_model.filter)
        self._restore_columns()
        self._refresh()

    def _lay_out(self) -> None:
        header = QHBoxLayout()
        header.addWidget(page_title("Jobs"))
        header.addStretch(1)
        self.filter_bar.search_field.setMinimumWidth(220)
        header.addWidget(self.filter_bar.search_field)
        header.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 16)
        layout.setSpacing(10)
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
        self._controller.connection.state_changed.connect(self._refresh)

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
        self._refresh()

    def _refresh(self, *_args: object) -> None:
        total, shown = self._model.rowCount(), self.filter_model.rowCount()
        if shown:
            self.body.setCurrentWidget(self.table)
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
