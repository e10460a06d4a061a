"""The Models page: models per computer and engine (with the architecture, quantization and
context length of llama.cpp's model files) with Load, Eject and Delete (on this computer and on
every other member alike), a Pull bar that pulls on any member with live progress, and
the model hub. Views only: every command goes through ``ModelsController``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QStyle,
    QTableView,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.catalog import Catalog
from app.controllers.models import ModelsController
from app.models.keyed_table import ROW_ROLE
from app.models.models import (
    ModelRow,
    ModelsModel,
    ModelsSortProxy,
    PullRow,
    details_text,
    engine_title,
    on_any_change,
    restarts_after_delete,
)
from app.models.models import supports as engine_supports
from app.pending import PendingKey
from app.window.banners import Banner
from app.window.model_hub import ModelHub
from app.window.widgets import muted_label, page_title
from backend.protocol.types.base import EngineName, NodeId

_ERROR = QColor("#c62828")
ROW_HEIGHT = 34
STATUS_WIDEST = "Available (offline)"
FOCUS_FRAME = QStyle.PixelMetric.PM_FocusFrameHMargin


def confirm_delete(parent: QWidget, row: ModelRow) -> bool:
    """Ask before deleting; an engine that restarts after a delete (LM Studio) says so."""
    text = (
        f"Delete {row.model} from {engine_title(row.engine)} on {row.where}?\n\n"
        "Its files are removed from disk; using it again means downloading it again."
    )
    if restarts_after_delete(row.engine):
        text += (
            f"\n\n{engine_title(row.engine)} restarts to finish deleting, so anything it is "
            "serving right now is interrupted."
        )
    answer = QMessageBox.question(
        parent,
        "Delete model?",
        text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


class RowActions(QWidget):
    """Load, Eject and Delete for one row of this computer or another member; a note for
    computers outside the cluster."""

    clicked = Signal(str, object)  # "load" | "eject" | "delete", PendingKey

    def __init__(self, key: PendingKey, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 1, 4, 1)
        layout.setSpacing(4)
        self.buttons: dict[str, QToolButton] = {}
        for name, title in (("load", "Load"), ("eject", "Eject"), ("delete", "Delete")):
            # Tool buttons: as wide as their word, so the model names keep the room.
            button = QToolButton()
            button.setText(title)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            button.clicked.connect(lambda _checked=False, n=name: self.clicked.emit(n, self.key))
            layout.addWidget(button)
            self.buttons[name] = button
        self.view_only = muted_label("View only")
        self.view_only.setToolTip("Pair this computer to manage its models from here.")
        layout.addWidget(self.view_only)
        layout.addStretch(1)

    def refresh(self, row: ModelRow, pending: bool, connected: bool) -> None:
        """Enable what makes sense now: nothing while an action is pending or the member that
        has the model cannot be reached."""
        for button in self.buttons.values():
            button.setVisible(row.managed)
            away = row.managed and not row.reachable
            button.setToolTip(f"{row.node_name} cannot be reached" if away else "")
        self.view_only.setVisible(not row.managed)
        usable = row.managed and row.reachable and connected and not pending
        load = usable and not row.loaded and engine_supports(row.engine, "load_model")
        eject = usable and row.loaded and engine_supports(row.engine, "unload_model")
        self.buttons["load"].setEnabled(load)
        self.buttons["eject"].setEnabled(eject)
        self.buttons["delete"].setEnabled(usable and engine_supports(row.engine, "delete_model"))


class PullBar(QWidget):
    """A model name, the computer to pull on (shown once there are members), one of its
    engines and a Pull button."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText(
            "Model to pull: llama3.2:3b, qwen/qwen3-8b, or a .gguf URL (llama.cpp)"
        )
        self.name_edit.setClearButtonEnabled(True)
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
        """The button works with a name, an engine, a connection and no pull of it running."""
        engine = self.engine_combo.currentData()
        name = self.name_edit.text().strip()
        node = self._controller.pull_node
        ready = self._controller.reachable(node) and bool(name) and isinstance(engine, str)
        busy = isinstance(engine, str) and self._controller.is_pulling(
            EngineName(engine), name, node
        )
        self.pull_button.setEnabled(ready and not busy)
        self.pull_button.setText("Pulling…" if busy else "Pull")

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
        self.error.setStyleSheet(f"color: {_ERROR.name()};")
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
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addLayout(bottom)
        self.show_pull(pull)

    def show_pull(self, pull: PullRow) -> None:
        """Show the pull's latest state (an unmeasured stage gives a busy bar)."""
        self.stage.setText("" if pull.failed else pull.stage)
        self.bar.setVisible(not pull.failed)
        self.error.setVisible(pull.failed)
        self.dismiss.setVisible(pull.failed)
        self.error.setText(f"Pull failed: {pull.error}" if pull.failed else "")
        if pull.percent is None:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(pull.percent * 10))
        self.bar.setFormat(pull.progress_text() or pull.stage)


class PullsPanel(QWidget):
    """One ``PullItem`` per row of the controller's pulls; hidden while there are none."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self.items: dict[PendingKey, PullItem] = {}
        on_any_change(controller.pulls, self.refresh)
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
            else:
                item.show_pull(pull)
        self.setVisible(bool(pulls))


class ModelsTab(QWidget):
    """The table of models with a row of buttons each, or a note while it is empty."""

    def __init__(self, controller: ModelsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._model: ModelsModel = controller.models
        self.proxy = ModelsSortProxy(self._model, self)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        # Fixed: a status that turns into "Ejecting…" must not be cut to "Eject...".
        status = ModelsModel.STATUS_COLUMN
        header.setSectionResizeMode(status, QHeaderView.ResizeMode.Fixed)
        widest = self.fontMetrics().horizontalAdvance(STATUS_WIDEST)
        self.table.setColumnWidth(status, widest + 2 * self.style().pixelMetric(FOCUS_FRAME) + 16)
        self.empty_note = muted_label()
        self.empty_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty_note, 1)
        on_any_change(self.proxy, self.refresh)
        controller.engines_changed.connect(self.refresh)
        controller.connection.state_changed.connect(self.refresh)
        self.refresh()

    def actions_for(self, key: PendingKey) -> RowActions | None:
        """The buttons shown on the row of ``key``."""
        position = self._model.position(key)
        if position is None:
            return None
        source = self._model.index(position, ModelsModel.ACTIONS_COLUMN)
        widget = self.table.indexWidget(self.proxy.mapFromSource(source))
        return widget if isinstance(widget, RowActions) else None

    def refresh(self, *_args: object) -> None:
        """Give every row its buttons, refresh their state, and show the note when empty."""
        connected = self._controller.connected
        for position in range(self.proxy.rowCount()):
            index = self.proxy.index(position, ModelsModel.ACTIONS_COLUMN)
            row = index.data(ROW_ROLE)
            if not isinstance(row, ModelRow):
                continue
            widget = self.table.indexWidget(index)
            if not isinstance(widget, RowActions) or widget.key != row.key:
                widget = RowActions(row.key)
                widget.clicked.connect(self._on_row_actions_clicked)
                self.table.setIndexWidget(index, widget)
            pending = self._controller.pending.get(row.key) is not None
            widget.refresh(row, pending, connected)
        # Only model files say what they are (llama.cpp's): no column of blanks without them.
        described = any(details_text(row.details) for row in self._model.rows())
        self.table.setColumnHidden(ModelsModel.DETAILS_COLUMN, not described)
        empty = self.proxy.rowCount() == 0
        self.table.setVisible(not empty)
        self.empty_note.setVisible(empty)
        self.empty_note.setText(self._empty_text())

    def _empty_text(self) -> str:
        if not self._controller.connected:
            return "Models appear here once the PAIR service is running."
        if not self._controller.pull_engines():
            return "No engine is running on this computer. Start Ollama or LM Studio to see models."
        return "No models yet. Pull one above, or pick one in the Model hub."

    def _on_row_actions_clicked(self, action: str, key: PendingKey) -> None:
        row = self._model.get(key)
        if row is None:
            return
        if action == "load":
            self._controller.load(key)
        elif action == "eject":
            self._controller.eject(key)
        elif action == "delete" and confirm_delete(self, row):
            self._controller.delete(key)


class ModelsPage(QWidget):
    """Title, a message strip for failed commands, the Pull bar and progress, and two tabs."""

    def __init__(
        self, controller: ModelsController, catalog: Catalog, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.notice = Banner(_ERROR, "Models", "")
        self.notice.add_button("Dismiss", self.notice.hide)
        self.notice.hide()
        self.pull_bar = PullBar(controller)
        self.pulls_panel = PullsPanel(controller)
        self.models_tab = ModelsTab(controller)
        self.hub = ModelHub(controller, catalog)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.models_tab, "On your computers")
        self.tabs.addTab(self.hub, "Model hub")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 24)
        layout.setSpacing(10)
        layout.addWidget(page_title("Models"))
        layout.addWidget(self.notice)
        layout.addWidget(self.pull_bar)
        layout.addWidget(self.pulls_panel)
        layout.addWidget(self.tabs, 1)
        controller.action_failed.connect(self._on_controller_action_failed)

    def _on_controller_action_failed(self, message: str) -> None:
        self.notice.message.setText(message)
        self.notice.show()
