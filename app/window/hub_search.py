"""Search Hugging Face for GGUF models by name: the repositories found (most downloaded first),
a chosen repository's files with sizes and the one suggested for the pull computer's memory,
and "Pull into llama.cpp" through the Models page's pull path. Views only: every call goes
through ``HubController``.
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.catalog import url_model_name
from app.controllers.hub import LLAMACPP, HubController, HubState, pull_blocker
from app.models.keyed_table import ROW_ROLE, KeyedTableModel
from app.models.models import on_any_change
from app.window.look import State
from app.window.widgets import muted_label, read_only_table, tint
from backend.protocol.types.hub import HUB_QUERY_MAX_CHARS, HubFile, HubModel

ROW_HEIGHT = 30
# Wait this long after the last key before searching (Enter searches at once): one search
# per pause, not one per letter.
SEARCH_DELAY_MS = 500


def _table(model: KeyedTableModel[str, HubModel] | KeyedTableModel[str, HubFile]) -> QTableView:
    table = read_only_table(model, ROW_HEIGHT, stretch_column=0)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    return table


def _stack(*pages: QWidget) -> QStackedWidget:
    stack = QStackedWidget()
    for page in pages:
        stack.addWidget(page)
    return stack


def _note(text: str = "") -> QLabel:
    label = muted_label(text)
    label.setWordWrap(True)
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    return label


class HubSearch(QWidget):
    """A search field, the repositories found, and the chosen repository's files."""

    def __init__(self, controller: HubController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search Hugging Face for GGUF models, e.g. qwen2.5 instruct")
        self.search.setClearButtonEnabled(True)
        self.search.setMaxLength(HUB_QUERY_MAX_CHARS)  # the longest the broker takes
        self.status = muted_label()  # one line, always there: the tables never move
        self.results = _table(controller.results)
        self.results_note = _note("Type a model's name to search Hugging Face.")
        self.results_stack = _stack(self.results, self.results_note)
        self.files_title = QLabel()
        self.files_title.setWordWrap(True)
        self.suggestion = QLabel()
        self.suggestion.setWordWrap(True)
        self.files = _table(controller.files)
        files_header = self.files.horizontalHeader()
        files_header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        files_header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.files_note = _note("Choose a repository to see its files.")
        self.files_stack = _stack(self.files, self.files_note)
        self.pull_button = QPushButton("Pull into llama.cpp")
        self.pull_button.setAutoDefault(False)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(SEARCH_DELAY_MS)
        self._build()
        self._connect()
        self.show_search()
        self.show_files()

    def _build(self) -> None:
        files = QWidget()
        files_layout = QVBoxLayout(files)
        files_layout.setContentsMargins(0, 0, 0, 0)
        files_layout.addWidget(self.files_title)
        files_layout.addWidget(self.suggestion)
        files_layout.addWidget(self.files_stack, 1)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.pull_button)
        files_layout.addLayout(bottom)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.results_stack)
        splitter.addWidget(files)
        splitter.setStretchFactor(0, 9)  # repository names are long: nearly half the width
        splitter.setStretchFactor(1, 11)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)

    def _connect(self) -> None:
        controller = self._controller
        self.search.textEdited.connect(self._on_search_text_edited)
        self.search.returnPressed.connect(self._on_search_return_pressed)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.results.selectionModel().currentRowChanged.connect(self._on_results_row_changed)
        self.files.selectionModel().currentRowChanged.connect(self.refresh_pull)
        self.files.doubleClicked.connect(self._on_pull_button_clicked)
        self.pull_button.clicked.connect(self._on_pull_button_clicked)
        controller.search_changed.connect(self.show_search)
        controller.files_changed.connect(self.show_files)
        models = controller.models
        on_any_change(models.models, self.refresh_pull)
        on_any_change(models.pulls, self.refresh_pull)
        models.pending.changed.connect(self.refresh_pull)
        models.engines_changed.connect(self.refresh_pull)
        models.pull_node_changed.connect(self.refresh_pull)

    def chosen_file(self) -> HubFile | None:
        """The file "Pull into llama.cpp" pulls: the selected one."""
        file = self.files.currentIndex().data(ROW_ROLE)
        return file if isinstance(file, HubFile) else None

    def show_search(self) -> None:
        """Show the search's state: searching, the results, none (a note in their place), or
        why it failed."""
        state = self._controller.search_state
        found = self._controller.results.rowCount()
        self.status.setText(_search_line(state, found))
        tint(self.status, State.ERROR if state.phase == "failed" else None)
        self.results_note.setText(_results_note(state))
        self.results_stack.setCurrentWidget(self.results if found else self.results_note)

    def show_files(self) -> None:
        """Show the chosen repository's files with the suggested one selected and its
        reason, or why they could not be listed."""
        state, files = self._controller.files_state, self._controller.files
        self.files_title.setText(f"<b>{state.subject}</b>" if state.subject else "")
        self.suggestion.setText(self._suggestion_text(state))
        failed = state.phase == "failed"
        tint(self.suggestion, State.ERROR if failed else State.OK)
        self.files_note.setText(_files_note(state))
        self.files_stack.setCurrentWidget(self.files if files.rowCount() else self.files_note)
        position = files.position(files.suggested) if files.suggested else None
        if position is not None:
            flags = QItemSelectionModel.SelectionFlag.ClearAndSelect
            rows = flags | QItemSelectionModel.SelectionFlag.Rows
            self.files.selectionModel().setCurrentIndex(files.index(position, 0), rows)
        self.refresh_pull()

    def refresh_pull(self, *_args: object) -> None:
        """Enable "Pull into llama.cpp" for a single-file model llama.cpp can pull now; the
        tooltip says why not otherwise."""
        file = self.chosen_file()
        models = self._controller.models
        node = models.pull_node
        name = url_model_name(file.url) if file is not None else ""
        reason = None if file is not None else "Choose a file first."
        if file is not None and file.parts > 1:
            reason = (
                f"This model is split into {file.parts} files, which PAIR does not pull yet: "
                "choose another quantization."
            )
        reason = reason or pull_blocker(models, LLAMACPP, node)
        pulling = bool(name) and models.is_pulling(LLAMACPP, name, node)
        there = bool(name) and models.is_installed(LLAMACPP, name, node)
        if reason is None and there:
            reason = f"{name} is already on {models.node_name_of(node)}."
        self.pull_button.setText("Pulling…" if pulling else "Pull into llama.cpp")
        self.pull_button.setEnabled(reason is None and not pulling)
        where = models.node_name_of(node)
        self.pull_button.setToolTip(reason or f"Download {name} into llama.cpp on {where}")

    def _suggestion_text(self, state: HubState) -> str:
        if state.phase != "done":
            return state.message if state.phase == "failed" else ""
        memory = self._controller.memory()
        models = self._controller.models
        where = models.node_name_of(models.pull_node)
        reason = state.message.rstrip(".")
        if memory is None:
            return f"The memory of {where} is not known yet, so no file is suggested."
        if self._controller.files.suggested is None:
            return f"For {memory.text(where)}: {reason}."
        return f"Suggested for {memory.text(where)}: {reason}."

    def _on_search_text_edited(self, _text: str) -> None:
        self.timer.start()

    def _on_search_return_pressed(self) -> None:
        self.timer.stop()
        self._controller.search(self.search.text())

    def _on_timer_timeout(self) -> None:
        self._controller.search(self.search.text())

    def _on_results_row_changed(self, current: object, _previous: object) -> None:
        model = self.results.currentIndex().data(ROW_ROLE)
        if isinstance(model, HubModel):
            self._controller.choose(model.repo)

    def _on_pull_button_clicked(self, *_args: object) -> None:
        file = self.chosen_file()
        self.refresh_pull()
        if file is not None and self.pull_button.isEnabled():
            self._controller.pull(file)


def _search_line(state: HubState, found: int) -> str:
    if state.phase == "busy":
        return f"Searching Hugging Face for “{state.subject}”…"
    if state.phase == "failed":
        return state.message
    if state.phase == "done" and found:
        plural = "repository" if found == 1 else "repositories"
        return (
            f"{found} {plural} with GGUF files, most downloaded first. Choose one to see its files."
        )
    return " "  # keeps the line's height while there is nothing to say


def _results_note(state: HubState) -> str:
    if state.phase == "done":
        return (
            f"No GGUF model on Hugging Face matches “{state.subject}”.\n"
            "Try fewer words, or another spelling of the model's name."
        )
    if state.phase == "busy":
        return "Searching…"
    if state.phase == "failed":
        return "No results: the search did not reach Hugging Face."
    return "Type a model's name to search Hugging Face."


def _files_note(state: HubState) -> str:
    if state.phase == "busy":
        return f"Listing the files of {state.subject}…"
    if state.phase == "done":
        return f"{state.subject} has no GGUF files."
    if state.phase == "failed":
        return "The files could not be listed."
    return "Choose a repository to see its files."
