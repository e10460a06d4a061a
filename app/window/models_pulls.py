"""The Models page's pulls: the Pull bar (a name or a .gguf address, the computer, the engine)
and the panel of pulls in progress, failed pulls and the last finished one. Views only: every
command goes through ``ModelsController``.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.models import ModelsController
from app.models.models import engine_title, on_any_change, serves_one_model
from app.models.pulls import PullRow, finished_text, plain_pull_error
from app.pending import PendingKey
from app.window.look import State
from app.window.widgets import SPACE_TIGHT, muted_label, tint
from backend.protocol.types.base import EngineName, NodeId

NAME_PLACEHOLDER = "Model to pull: llama3.2:3b, qwen/qwen3-8b, or a .gguf URL (llama.cpp)"
FILE_PLACEHOLDER = "Address of a .gguf file, e.g. https://huggingface.co/…/model-Q4_K_M.gguf"
# Enough for a model name to stay readable when the window is narrow.
NAME_MIN_CHARS = 22


def is_model_file_address(text: str) -> bool:
    """Whether ``text`` is an http(s) address, as llama.cpp pulls need."""
    return text.strip().startswith(("http://", "https://"))


class PullBar(QWidget):
    """A model name, the computer to pull on (shown once there are members), one of its
    engines and a Pull button."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText(NAME_PLACEHOLDER)
        self.name_edit.setClearButtonEnabled(True)
        width = self.name_edit.fontMetrics().averageCharWidth() * NAME_MIN_CHARS
        self.name_edit.setMinimumWidth(width)
        self.node_combo = QComboBox()
        self.node_combo.setToolTip("The computer that downloads the model")
        self.node_combo.setMinimumContentsLength(12)
        self.engine_combo = QComboBox()
        self.engine_combo.setMinimumContentsLength(10)
        self.pull_button = QPushButton("Pull")
        self.pull_button.setDefault(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Pull a model"))
        layout.addWidget(self.name_edit, 1)
        layout.addWidget(self.node_combo)
        layout.addWidget(self.engine_combo)
        layout.addWidget(self.pull_button)
        self.name_edit.textChanged.connect(self.refresh)
        self.name_edit.returnPressed.connect(self._on_pull_button_clicked)
        self.node_combo.activated.connect(self._on_node_combo_activated)
        self.engine_combo.currentIndexChanged.connect(self.refresh)
        self.pull_button.clicked.connect(self._on_pull_button_clicked)
        controller.engines_changed.connect(self._on_controller_engines_changed)
        controller.pull_node_changed.connect(self._on_controller_engines_changed)
        on_any_change(controller.pulls, self.refresh)
        controller.pending.changed.connect(self.refresh)
        self._on_controller_engines_changed()

    def refresh(self, *_args: object) -> None:
        """The button works with a name (an address for llama.cpp), an engine, a connection
        and no pull of it running; otherwise its tooltip says what is missing."""
        engine = self.engine_combo.currentData()
        name = self.name_edit.text().strip()
        node = self._controller.pull_node
        file_engine = isinstance(engine, str) and serves_one_model(engine)
        self.name_edit.setPlaceholderText(FILE_PLACEHOLDER if file_engine else NAME_PLACEHOLDER)
        busy = isinstance(engine, str) and self._controller.is_pulling(
            EngineName(engine), name, node
        )
        reason = self._blocked_reason(engine, name, node)
        self.pull_button.setEnabled(reason is None and not busy)
        self.pull_button.setText("Pulling…" if busy else "Pull")
        self.pull_button.setToolTip(reason or "")

    def _blocked_reason(self, engine: object, name: str, node: NodeId | None) -> str | None:
        if not self._controller.reachable(node):
            return "The PAIR service is not running, or that computer cannot be reached."
        if not isinstance(engine, str):
            return "No engine that can pull is running there: start one on the Engines page."
        if not name:
            return "Type a model's name (or a .gguf address for llama.cpp)."
        if serves_one_model(engine) and not is_model_file_address(name):
            return f"{engine_title(engine)} pulls a model file: paste the address of a .gguf file."
        return None

    def _on_controller_engines_changed(self) -> None:
        self._fill_nodes()
        chosen = self.engine_combo.currentData()
        node = self._controller.pull_node
        engines = self._controller.pull_engines(node)
        self.engine_combo.blockSignals(True)
        self.engine_combo.clear()
        for engine in engines:
            self.engine_combo.addItem(engine_title(engine), engine)
        if not engines:
            self.engine_combo.addItem("No engine running")
        elif chosen in engines:
            self.engine_combo.setCurrentIndex(engines.index(chosen))
        self.engine_combo.setEnabled(bool(engines))
        self.engine_combo.blockSignals(False)
        self.refresh()

    def _fill_nodes(self) -> None:
        nodes = self._controller.pull_nodes()
        self.node_combo.blockSignals(True)
        self.node_combo.clear()
        for node, label in nodes:
            self.node_combo.addItem(label, node)
        self.node_combo.setCurrentIndex(
            max(0, self.node_combo.findData(self._controller.pull_node))
        )
        self.node_combo.blockSignals(False)
        self.node_combo.setVisible(len(nodes) > 1)

    def _on_node_combo_activated(self, _index: int) -> None:
        node = self.node_combo.currentData()
        self._controller.set_pull_node(NodeId(node) if isinstance(node, str) else None)

    def _on_pull_button_clicked(self) -> None:
        engine = self.engine_combo.currentData()
        if self.pull_button.isEnabled() and isinstance(engine, str):
            node = self._controller.pull_node
            self._controller.pull(EngineName(engine), self.name_edit.text(), node)
            self.name_edit.clear()


class PullItem(QFrame):
    """One pull: name, engine and (another member's) computer, the stage, a progress bar (or
    the error and Dismiss)."""

    def __init__(self, controller: ModelsController, pull: PullRow, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        where = "" if pull.local else f" on {pull.node_name}"
        self.title = QLabel(f"<b>{pull.model}</b> · {engine_title(pull.engine)}{where}")
        self.stage = muted_label()
        self.stage.setWordWrap(False)
        self.bar = QProgressBar()
        self.bar.setTextVisible(True)
        self.error = QLabel()
        self.error.setWordWrap(True)
        tint(self.error, State.ERROR)
        self.dismiss = QPushButton("Dismiss")
        self.dismiss.clicked.connect(lambda: controller.dismiss_pull(pull.key))
        top = QHBoxLayout()
        top.addWidget(self.title)
        top.addStretch(1)
        top.addWidget(self.stage)
        bottom = QHBoxLayout()
        bottom.addWidget(self.bar, 1)
        bottom.addWidget(self.error, 1)
        bottom.addWidget(self.dismiss)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(SPACE_TIGHT)
        layout.addLayout(top)
        layout.addLayout(bottom)
        self.show_pull(pull)

    def show_pull(self, pull: PullRow) -> None:
        """Show the pull's latest state (an unmeasured stage gives a busy bar); a failure in
        a plain sentence, the engine's own words in the tooltip."""
        self.stage.setText("" if pull.failed else pull.stage)
        self.bar.setVisible(not pull.failed)
        self.error.setVisible(pull.failed)
        self.dismiss.setVisible(pull.failed)
        self.error.setText(f"Pull failed: {plain_pull_error(pull)}" if pull.failed else "")
        self.error.setToolTip(
            f"{engine_title(pull.engine)} said: {pull.error}" if pull.failed else ""
        )
        if pull.percent is None:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(pull.percent * 10))
        self.bar.setFormat(pull.progress_text() or pull.stage)


class FinishedLine(QFrame):
    """The last pull that ended well: where the model is and how to use it, until dismissed
    or the next pull starts."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.message = QLabel()
        self.message.setWordWrap(True)
        tint(self.message, State.OK)
        self.dismiss = QPushButton("Dismiss")
        self.dismiss.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.dismiss)
        self.hide()


class PullsPanel(QWidget):
    """One ``PullItem`` per row of the controller's pulls and the last finished pull; hidden
    while there is nothing to show."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self.items: dict[PendingKey, PullItem] = {}
        self.finished = FinishedLine()
        self.finished.dismiss.clicked.connect(self.refresh)
        self._layout.addWidget(self.finished)
        on_any_change(controller.pulls, self.refresh)
        controller.pull_finished.connect(self._on_controller_pull_finished)
        self.refresh()

    def refresh(self, *_args: object) -> None:
        """Add, update and drop items to match the pulls model."""
        pulls = {pull.key: pull for pull in self._controller.pulls.rows()}
        for key in [key for key in self.items if key not in pulls]:
            self.items.pop(key).deleteLater()
        for key, pull in pulls.items():
            item = self.items.get(key)
            if item is None:
                item = self.items[key] = PullItem(self._controller, pull)
                self._layout.addWidget(item)
                self.finished.hide()  # a new pull: the last one's news is old
            else:
                item.show_pull(pull)
        self.setVisible(bool(pulls) or not self.finished.isHidden())

    def _on_controller_pull_finished(self, key: PendingKey) -> None:
        where = self._controller.node_name_of(
            None if key.node == self._controller.node_id else key.node
        )
        self.finished.message.setText(finished_text(key.engine, key.model, where))
        self.finished.show()
        self.refresh()
